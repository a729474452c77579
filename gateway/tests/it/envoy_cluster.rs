//! Envoy's descriptors on a real Redis Cluster (3 primaries), Redis 7.0 and Valkey 8.1.
//! Descriptors whose keys share a hash tag (by default the first entry's `key=value`; the
//! `subject` field names another entry) are one `RL.MHIT` on the slot's owner; across
//! slots they are charged in order, and what was charged is given back when a later one
//! is over the limit.

use testkit::cluster::Cluster;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const DESCRIPTORS: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 1}
"#;

fn calls(cluster: &Cluster, command: &str) -> i64 {
    cluster
        .primaries()
        .iter()
        .map(|p| p.command_calls(command).unwrap_or(0))
        .sum()
}

#[test]
fn one_subject_is_one_mhit_and_other_slots_are_given_back() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let seeds = cluster.gateway_seeds();
        let mut envoy = EnvoyGateway::start(
            &format!("[redis]\ncluster = [{}]\ndeadline_ms = 1000\n", seeds),
            &[("api.yaml", DESCRIPTORS)],
        );
        for primary in cluster.primaries() {
            let user = cluster
                .tag_on(primary, "user=u")
                .trim_start_matches("user=")
                .to_owned();
            let before = primary.command_calls("RL.MHIT").unwrap_or(0);
            let both = || {
                request(
                    "api",
                    vec![
                        desc(&[("user", &user)]),
                        desc(&[("user", &user), ("path", "/orders")]),
                    ],
                )
            };
            for expected in [1, 0] {
                let answer = envoy.ask(both());
                assert_eq!(overall(&answer), Code::Ok, "{flavor:?}: {answer:?}");
                assert_eq!(remaining(&answer, 1), expected, "{flavor:?}");
            }
            let denied = envoy.ask(both());
            assert_eq!(overall(&denied), Code::OverLimit, "{flavor:?}");
            assert_eq!(
                remaining(&denied, 0),
                8,
                "{flavor:?}: nothing taken from user"
            );
            assert_eq!(
                primary.command_calls("RL.MHIT").unwrap_or(0) - before,
                3,
                "{flavor:?}: every decision one RL.MHIT on the owner of {{user={user}}}"
            );
        }
        assert_eq!(calls(&cluster, "RL.HIT"), 0, "{flavor:?}");

        // A user and a team in other slots: charged in order, the user's hit given back
        // when the team is over.
        let primaries = cluster.primaries();
        let user = cluster
            .tag_on(primaries[0], "user=v")
            .trim_start_matches("user=")
            .to_owned();
        let team = cluster
            .tag_on(primaries[1], "team=t")
            .trim_start_matches("team=")
            .to_owned();
        let pair = || {
            request(
                "api",
                vec![desc(&[("user", &user)]), desc(&[("team", &team)])],
            )
        };
        let first = envoy.ask(pair());
        assert_eq!(overall(&first), Code::Ok, "{flavor:?}: {first:?}");
        assert_eq!(remaining(&first, 0), 9);
        let refunds = calls(&cluster, "RL.REFUND");
        let second = envoy.ask(pair());
        assert_eq!(overall(&second), Code::OverLimit, "{flavor:?}: {second:?}");
        assert_eq!(code(&second, 1), Code::OverLimit);
        assert_eq!(
            remaining(&second, 0),
            9,
            "{flavor:?}: the user's hit was given back"
        );
        assert_eq!(calls(&cluster, "RL.REFUND") - refunds, 1, "{flavor:?}");
        // A refund (is_negative_hits) and a look in a cluster.
        let back = envoy.ask(request("api", vec![desc_hits(&[("team", &team)], 1, true)]));
        assert_eq!(remaining(&back, 0), 1, "{flavor:?}");
        let look = envoy.ask(request(
            "api",
            vec![
                desc_hits(&[("user", &user)], 0, false),
                desc_hits(&[("team", &team)], 0, false),
            ],
        ));
        assert_eq!(
            (remaining(&look, 0), remaining(&look, 1)),
            (9, 1),
            "{flavor:?}: {look:?}"
        );
    });
}
