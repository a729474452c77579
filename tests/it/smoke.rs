use testkit::*;

#[test]
fn loads_on_every_flavor_and_answers_five_integers() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let first = hit(&mut con, "user:42", &["5", "1m"]);
        assert!(first.allowed, "{flavor:?}");
        assert_eq!(
            (first.limit, first.remaining, first.retry_after_ms),
            (5, 4, 0)
        );
    });
}
