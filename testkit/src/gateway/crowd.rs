//! The crowd the stacking tests send at a per-user limit stacked on a global cap: four
//! users, two threads each, 15 requests per thread, so 30 tries per user against a user
//! limit of 20, and 120 in all against a cap of 50 under the 80 the users could take.

use super::Gateway;
use std::sync::Arc;

/// A per-user rule (20 per hour, keyed by `X-User`) that lets matching go on to a global
/// cap (50 per hour) on the same paths.
pub const USER_THEN_CAP: &str = r#"
[[rule]]
name = "user"
path = "/api/**"
key = "header:X-User"
limits = ["20/1h"]
stack = true

[[rule]]
name = "cap"
path = "/api/**"
key = "global"
limits = ["50/1h"]
"#;

/// Users, and the user limit and cap of [`USER_THEN_CAP`].
pub const USERS: usize = 4;
pub const USER_LIMIT: usize = 20;
pub const CAP: usize = 50;

/// Sends the crowd at `GET /api/x` through `gateway` (every answer a 200 or a 429, none
/// let through by a failure) and returns how many requests each user got through.
pub fn admitted_per_user(gateway: &Arc<Gateway>) -> Vec<usize> {
    let threads: Vec<_> = (0..2 * USERS)
        .map(|t| {
            let gateway = gateway.clone();
            std::thread::spawn(move || {
                let user = format!("u{}", t % USERS);
                (0..15)
                    .filter(|_| {
                        let resp = gateway.send("GET", "/api/x", &[("X-User", &user)]);
                        assert!(resp.status == 200 || resp.status == 429, "{resp:?}");
                        assert_eq!(resp.fail_open_reason(), None, "{resp:?}");
                        resp.status == 200
                    })
                    .count()
            })
        })
        .collect();
    let admitted: Vec<usize> = threads
        .into_iter()
        .map(|t| t.join().expect("a client thread panicked"))
        .collect();
    let per_user: Vec<usize> = (0..USERS)
        .map(|u| admitted[u] + admitted[u + USERS])
        .collect();
    assert!(
        per_user.iter().all(|&n| n <= USER_LIMIT),
        "a user above its limit: {per_user:?}"
    );
    per_user
}
