//! The README's nginx set-up, `gateway/nginx.example.conf` as it is (only its ports
//! changed), in front of the demo upstream with rl-gateway in check mode: allowed requests
//! reach the API with the RateLimit fields, the check's denial becomes a 429 with
//! `Retry-After`, and the API's own 403 still passes through as a 403.

use testkit::gateway::*;

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nginx from Debian (`make setup` installs it), run in the foreground as one process
/// (`master_process off`: a master killed on drop would leave its workers running),
/// killed on drop.
struct Nginx {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(gateway_port: u16, api_port: u16) -> Nginx {
        let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("nginx is not installed: run `make setup`");
        let dir = tempfile::Builder::new()
            .prefix("rl-nginx-")
            .tempdir()
            .expect("temp dir");
        let port = free_port();
        let example = fs::read_to_string(workspace_root().join("gateway/nginx.example.conf"))
            .expect("gateway/nginx.example.conf");
        let server = example
            .replace("listen 80;", &format!("listen 127.0.0.1:{port};"))
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{gateway_port}"))
            .replace("127.0.0.1:9000", &format!("127.0.0.1:{api_port}"));
        assert_ne!(server, example, "the example's ports were found");
        let d = dir.path().display();
        let config = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d};\n  \
             proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  \
             scgi_temp_path {d};\n{server}\n}}\n"
        );
        let path = dir.path().join("nginx.conf");
        fs::write(&path, config).expect("nginx.conf");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let mut nginx = Nginx {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + START_LIMIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = nginx.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "nginx did not start ({exited:?}): {}",
                fs::read_to_string(nginx._dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_documented_nginx_snippet_limits_through_the_check_endpoint() {
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        "mode = \"check\"\ncheck_deny_status = 403\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
        &format!(
            "{}[[rule]]\nname = \"api\"\npath = \"/api/**\"\nlimits = [\"3/1h\"]\n",
            redis_section(redis.port(), "")
        ),
    );
    let nginx = Nginx::start(gateway.port, upstream.port);
    let agent = agent();

    // The API's own 403 passes through as a 403 (not rate limited: no rule matches).
    let forbidden = send(&agent, "GET", &nginx.url("/private?status=403"), &[]);
    assert_eq!(forbidden.status, 403, "{forbidden:?}");
    assert_eq!(forbidden.upstream_request_line(), "GET /private?status=403");

    for expected in (0..3).rev() {
        let resp = send(&agent, "GET", &nginx.url("/api/items"), &[]);
        assert_eq!(resp.status, 200, "{resp:?}");
        assert_eq!(
            resp.upstream_request_line(),
            "GET /api/items",
            "reached the API"
        );
        assert_eq!(resp.remaining(), expected, "{resp:?}");
        let policy = resp.policy();
        assert_eq!((policy[0].q, policy[0].w), (3, Some(3600)), "{resp:?}");
    }
    let before = upstream.requests();
    let denied = send(&agent, "GET", &nginx.url("/api/items"), &[]);
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(denied.body, "Too Many Requests\n");
    assert!(denied.retry_after() >= 1);
    assert_eq!(denied.remaining(), 0, "{denied:?}");
    assert_eq!(
        upstream.requests(),
        before,
        "a denied request never reaches the API"
    );
    // The gateway counted the requests nginx asked about, keyed by nginx's client address.
    assert_eq!(gateway.metrics().decisions("api", "allowed"), 3.0);
    assert_eq!(
        keys(&redis, "rl:*"),
        vec!["rl:{ip:127.0.0.1}:api".to_string()]
    );
}

/// `GET <target>` written byte for byte to nginx (ureq would escape raw UTF-8), returning
/// the status.
fn raw_status(port: u16, target: &[u8]) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let mut request = b"GET ".to_vec();
    request.extend_from_slice(target);
    request.extend_from_slice(b" HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n");
    stream.write_all(&request).expect("send");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"))
}

#[test]
fn raw_utf8_from_nginx_meets_its_rule_and_a_broken_uri_never_reaches_the_api() {
    each_flavor(|flavor| {
        let redis = Server::start(ServerConfig::new(flavor));
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            "mode = \"check\"\ncheck_deny_status = 403\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            &format!(
                "{}[[rule]]\nname = \"api\"\npath = \"/api/**\"\nlimits = [\"2/1h\"]\n",
                redis_section(redis.port(), "")
            ),
        );
        let nginx = Nginx::start(gateway.port, upstream.port);
        // nginx passes $request_uri raw: the é arrives as two bytes, not as %C3%A9.
        let statuses: Vec<u16> = (0..3)
            .map(|_| raw_status(nginx.port, "/api/café".as_bytes()))
            .collect();
        assert_eq!(statuses, [200, 200, 429], "{flavor:?}");
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
        // A URI the gateway refuses (400: an encoded slash, which nginx itself lets
        // through) fails the check: nginx answers 500, the API never sees it.
        let status = raw_status(nginx.port, b"/api%2Fx");
        assert_eq!(status, 500, "{flavor:?}");
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
        assert_eq!(
            keys(&redis, "rl:*"),
            vec!["rl:{ip:127.0.0.1}:api".to_string()],
            "{flavor:?}"
        );
    });
}
