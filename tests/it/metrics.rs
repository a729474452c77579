//! `INFO ratelimit` counts every decision by algorithm, and every error.
use testkit::*;

#[test]
fn info_counts_decisions_per_algorithm_and_errors() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        assert_eq!(server.info_stat("hits"), 0, "{flavor:?}: a fresh server");
        let mut con = server.conn();
        for _ in 0..3 {
            hit(&mut con, "f", &["2", "1h"]); // allowed, allowed, denied
        }
        hit(&mut con, "g", &["1", "1h", "ALGO", "gcra"]);
        hit(&mut con, "g", &["1", "1h", "ALGO", "gcra"]);
        let _: Vec<i64> = redis::cmd("CL.THROTTLE")
            .arg("c")
            .arg("0")
            .arg("1")
            .arg("60")
            .query(&mut con)
            .expect("CL.THROTTLE");
        // Looks and refunds decide nothing: not counted as hits.
        let _: Vec<i64> = redis::cmd("RL.PEEK")
            .arg("f")
            .arg("2")
            .arg("1h")
            .query(&mut con)
            .expect("PEEK");
        let _: Vec<i64> = redis::cmd("RL.REFUND")
            .arg("f")
            .arg("2")
            .arg("1h")
            .query(&mut con)
            .expect("REFUND");
        for bad in [&["f", "0", "1h"][..], &["f", "2", "1y"], &["f"]] {
            error_text(&mut con, redis::cmd("RL.HIT").arg(bad));
        }
        redis::cmd("LPUSH")
            .arg("list")
            .arg("x")
            .exec(&mut con)
            .expect("LPUSH");
        error_text(
            &mut con,
            redis::cmd("RL.HIT").arg("list").arg("1").arg("1h"),
        );

        let expected = [
            ("hits", 6),
            ("allowed", 4),
            ("denied", 2),
            ("errors", 4),
            ("fixed_allowed", 2),
            ("fixed_denied", 1),
            ("gcra_allowed", 2),
            ("gcra_denied", 1),
            ("sliding_allowed", 0),
            ("log_denied", 0),
            ("token_allowed", 0),
        ];
        for (field, count) in expected {
            assert_eq!(server.info_stat(field), count, "{flavor:?}: {field}");
        }
    });
}

#[test]
fn denied_hits_fire_a_keyspace_event_when_asked_to() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor)
            .arg("notify-keyspace-events", "Eg")
            .start();
        let mut con = server.conn();
        let mut listener = server.conn();
        let mut pubsub = listener.as_pubsub();
        pubsub
            .subscribe("__keyevent@0__:rl.denied")
            .expect("SUBSCRIBE");
        pubsub
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        // Off by default: a denial fires nothing.
        hit(&mut con, "quiet", &["1", "1h"]);
        hit(&mut con, "quiet", &["1", "1h"]);
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.notify-denied", "yes"])
            .exec(&mut con)
            .expect("CONFIG SET");
        hit(&mut con, "abuser", &["1", "1h"]);
        assert!(!hit(&mut con, "abuser", &["1", "1h"]).allowed);
        let message = pubsub.get_message().expect("the denial's event");
        let payload: String = message.get_payload().expect("a key name");
        assert_eq!(
            payload, "abuser",
            "{flavor:?}: only the denial after the config, on its key"
        );
    });
}
