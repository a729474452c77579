//! Bounds on what one request can cost: no key longer than 256 bytes
//! whatever the method, path and headers; a head over `max_header_bytes` (16 KiB by
//! default) gets 431; a path over `max_path_segments` (128 by default) gets 414.

use testkit::gateway::raw_http;
use testkit::gateway::*;

/// The longest rule name and key prefix the file may have, so that the keys are the
/// longest a client can make.
const NAME: &str = "a-rule-name-of-the-longest-length-allowed-48-byt";

fn worst_case_rules() -> String {
    assert_eq!(NAME.len(), 48);
    format!(
        r#"
[[rule]]
name = "{NAME}"
methods = ["POST", "VERY-LONG-METHOD-OF-32-BYTES-XYZ"]
path = "/**"
key = "header:X-Api-Key"
per_endpoint = true
limits = ["100/1m"]

[default]
per_endpoint = true
limits = ["100/1m"]
"#
    )
}

/// Every key in the server (SCAN), so that none escapes a pattern.
fn all_keys(redis: &Server) -> Vec<String> {
    let mut conn = redis.conn();
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

#[test]
fn worst_case_requests_make_no_key_longer_than_256_bytes() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}{}",
                redis_section(
                    redis.port(),
                    "key_prefix = \"a-key-prefix-of-32-bytes-length:\""
                ),
                worst_case_rules()
            ),
        );
        let port = gateway.port;
        // A 60 KB method: refused (431, the head is over 16 KiB) before it can be a key.
        let method = vec![b'M'; 60_000];
        let answer = raw_http::request(port, &method, b"/x", b"");
        assert_eq!(answer.status, 431, "{flavor:?}");
        let long_value = "v".repeat(5_000);
        let long_path = format!("/{}", "p%FF".repeat(2_000));
        let many_segments = "/s".repeat(128);
        let key_header = format!("X-Api-Key: {long_value}\r\n");
        let odd_key = b"X-Api-Key: {\xff\xfe}\x80{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}\r\n";
        // The longest parts written out rather than hashed: 64 bytes each.
        let widest_path = format!("/{}", "w".repeat(63));
        let widest_key = format!("X-Api-Key: {}\r\n", "k".repeat(64));
        let requests: [(&[u8], &[u8], &[u8]); 7] = [
            (
                b"VERY-LONG-METHOD-OF-32-BYTES-XYZ",
                widest_path.as_bytes(),
                widest_key.as_bytes(),
            ),
            (b"POST", long_path.as_bytes(), key_header.as_bytes()),
            (
                b"VERY-LONG-METHOD-OF-32-BYTES-XYZ",
                long_path.as_bytes(),
                odd_key,
            ),
            (
                b"very-long-method-of-32-bytes-xyz",
                many_segments.as_bytes(),
                key_header.as_bytes(),
            ),
            (b"GET", long_path.as_bytes(), b""),
            (b"VERSION-CONTROL", many_segments.as_bytes(), b""),
            (b"POST", b"/short", odd_key),
        ];
        for (method, path, headers) in requests {
            let answer = raw_http::request(port, method, path, headers);
            assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
        }
        let keys = all_keys(&redis);
        assert!(keys.len() >= 5, "{flavor:?}: {keys:?}");
        let longest = keys.iter().map(String::len).max().unwrap_or(0);
        eprintln!(
            "{flavor:?}: {} keys, the longest {longest} bytes",
            keys.len()
        );
        assert!(
            longest <= 256,
            "{flavor:?}: a key of {longest} bytes: {:?}",
            keys.iter().max_by_key(|k| k.len())
        );
    });
}

#[test]
fn a_head_over_max_header_bytes_gets_431() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = stack(flavor, "[default]\nlimits = [\"100/1m\"]\n");
        let header = |size: usize| format!("X-Padding: {}\r\n", "h".repeat(size));
        let answer = raw_http::request(gateway.port, b"GET", b"/", header(15_000).as_bytes());
        assert_eq!(answer.status, 200, "{flavor:?}: under 16 KiB");
        let answer = raw_http::request(gateway.port, b"GET", b"/", header(17_000).as_bytes());
        assert_eq!(answer.status, 431, "{flavor:?}: over 16 KiB");
        let long_target = format!("/{}", "t".repeat(17_000));
        let answer = raw_http::request(gateway.port, b"GET", long_target.as_bytes(), b"");
        assert_eq!(
            answer.status, 431,
            "{flavor:?}: a long request line is head too"
        );
        let many: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
        let answer = raw_http::request(gateway.port, b"GET", b"/", many.as_bytes());
        assert_eq!(answer.status, 431, "{flavor:?}: more than 100 headers");
        assert_eq!(
            upstream.requests(),
            1,
            "{flavor:?}: only the small head forwarded"
        );
    });
    let (_redis, _upstream, gateway) = stack(
        Flavor::Redis,
        "[requests]\nmax_header_bytes = 4096\n[default]\nlimits = [\"100/1m\"]\n",
    );
    let padding = format!("X-Padding: {}\r\n", "h".repeat(5_000));
    let answer = raw_http::request(gateway.port, b"GET", b"/", padding.as_bytes());
    assert_eq!(answer.status, 431, "over the configured 4 KiB");
    assert_eq!(
        raw_http::request(gateway.port, b"GET", b"/", b"").status,
        200
    );
}

#[test]
fn a_path_over_max_path_segments_gets_414() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(
            flavor,
            "[requests]\nmax_header_bytes = 131072\n[default]\nper_endpoint = true\nlimits = [\"100/1m\"]\n",
        );
        let port = gateway.port;
        assert_eq!(
            raw_http::request(port, b"GET", "/a".repeat(128).as_bytes(), b"").status,
            200
        );
        assert_eq!(
            raw_http::request(port, b"GET", "/a".repeat(129).as_bytes(), b"").status,
            414
        );
        let answer = raw_http::request(port, b"GET", "/a".repeat(20_000).as_bytes(), b"");
        assert_eq!(answer.status, 414, "{flavor:?}: {answer:?}");
        // Empty segments merge: they are not segments.
        let slashes = format!("{}x", "/".repeat(20_000));
        assert_eq!(
            raw_http::request(port, b"GET", slashes.as_bytes(), b"").status,
            200
        );
        assert_eq!(upstream.requests(), 2, "{flavor:?}");

        let small = Gateway::in_front_of(
            &upstream,
            &redis,
            "[requests]\nmax_path_segments = 4\n[default]\nlimits = [\"100/1m\"]\n",
        );
        assert_eq!(
            raw_http::request(small.port, b"GET", b"/a/b/c/d", b"").status,
            200
        );
        assert_eq!(
            raw_http::request(small.port, b"GET", b"/a/b/c/d/e", b"").status,
            414
        );
    });
}
