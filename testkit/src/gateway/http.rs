//! HTTP through ureq 2: [`Resp`] is every answer, whatever its status, with helpers that
//! parse `RateLimit-Policy` and `RateLimit` as RFC 8941 Lists (sfv); raw requests for
//! bytes ureq would refuse.

use super::*;

/// An HTTP client with generous timeouts that never follows redirects.
pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .redirects(0)
        .build()
}

/// One HTTP answer, whatever its status.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    /// Every header line, names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Sends `method url` with `headers`; a 4xx or 5xx is an answer like any other, only a
/// transport failure panics.
pub fn send(agent: &ureq::Agent, method: &str, url: &str, headers: &[(&str, &str)]) -> Resp {
    let mut request = agent.request(method, url);
    for (name, value) in headers {
        request = request.set(name, value);
    }
    let response = match request.call() {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(err) => panic!("{method} {url}: {err}"),
    };
    let status = response.status();
    let mut names = response.headers_names();
    names.dedup();
    let mut seen = Vec::new();
    let mut headers = Vec::new();
    for name in names {
        if seen.contains(&name) {
            continue;
        }
        for value in response.all(&name) {
            headers.push((name.clone(), value.to_string()));
        }
        seen.push(name);
    }
    let mut body = String::new();
    response
        .into_reader()
        .read_to_string(&mut body)
        .unwrap_or_else(|e| panic!("{method} {url}: reading the body: {e}"));
    Resp {
        status,
        headers,
        body,
    }
}

/// Sends `GET path` over a fresh TCP connection with the raw header lines `headers` (each
/// ending in CRLF; bytes ureq would refuse, such as obs-text, are fine) and
/// `Connection: close`, and returns the status code of the answer.
pub fn raw_get(port: u16, path: &str, headers: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n").into_bytes();
    request.extend_from_slice(headers);
    request.extend_from_slice(b"Connection: close\r\n\r\n");
    stream.write_all(&request).expect("send the request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read the answer");
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or("");
    status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: not an HTTP answer: {text:?}"))
}

impl Resp {
    /// Every value of the header `name` (any case), in order.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The header `name`, its lines joined with ", " (as a structured-field List may be
    /// split), `None` when absent.
    pub fn header(&self, name: &str) -> Option<String> {
        let values = self.header_values(name);
        (!values.is_empty()).then(|| values.join(", "))
    }

    pub fn has(&self, name: &str) -> bool {
        !self.header_values(name).is_empty()
    }

    /// Whether the answer carries either of the RateLimit headers.
    pub fn has_ratelimit_headers(&self) -> bool {
        self.has("ratelimit") || self.has("ratelimit-policy")
    }

    /// `RateLimit-Policy`, parsed; panics when absent or malformed.
    pub fn policy(&self) -> Vec<PolicyTier> {
        let value = self
            .header("ratelimit-policy")
            .unwrap_or_else(|| panic!("no RateLimit-Policy header in {self:?}"));
        parse_policy(&value)
    }

    /// `RateLimit`, parsed; panics when absent or malformed.
    pub fn limits(&self) -> Vec<LimitTier> {
        let value = self
            .header("ratelimit")
            .unwrap_or_else(|| panic!("no RateLimit header in {self:?}"));
        parse_ratelimit(&value)
    }

    /// The `r` of the only tier of `RateLimit`.
    pub fn remaining(&self) -> i64 {
        let tiers = self.limits();
        assert_eq!(tiers.len(), 1, "one tier expected: {self:?}");
        tiers[0].r
    }

    /// `Retry-After` as whole seconds: digits only (no date, no fraction), at least 1.
    pub fn retry_after(&self) -> u64 {
        let values = self.header_values("retry-after");
        assert_eq!(values.len(), 1, "exactly one Retry-After: {self:?}");
        let value = values[0];
        assert!(
            !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()),
            "Retry-After is not a whole number of seconds: {value:?}"
        );
        let seconds: u64 = value.parse().expect("Retry-After fits in u64");
        assert!(seconds >= 1, "Retry-After is at least 1: {value:?}");
        seconds
    }

    /// The value of request header `name` as the demo upstream echoed it in its body
    /// (one `name: value` line per header after the request line).
    pub fn upstream_saw_header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.body.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            (n.trim() == name).then(|| v.trim().to_string())
        })
    }

    /// The request line the demo upstream echoed (`METHOD PATH?QUERY`).
    pub fn upstream_request_line(&self) -> &str {
        self.body.lines().next().unwrap_or("")
    }

    /// The fail-open reason the upstream was told about (`X-RateLimit-Fail-Open`).
    pub fn fail_open_reason(&self) -> Option<String> {
        self.upstream_saw_header("x-ratelimit-fail-open")
    }
}

/// One item of `RateLimit-Policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTier {
    pub name: String,
    pub q: i64,
    pub w: Option<i64>,
}

/// One item of `RateLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitTier {
    pub name: String,
    pub r: i64,
    pub t: i64,
}

/// Parses a structured-field List whose items are Strings with Integer parameters only
/// (no inner lists), as `(name, [(param, value)])`.
fn parse_named_items(header: &str, value: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let list = sfv::Parser::parse_list(value.as_bytes())
        .unwrap_or_else(|e| panic!("{header}: {value:?} is not a structured-field List: {e}"));
    assert!(!list.is_empty(), "{header}: empty List {value:?}");
    list.into_iter()
        .map(|entry| {
            let item = match entry {
                sfv::ListEntry::Item(item) => item,
                sfv::ListEntry::InnerList(inner) => {
                    panic!("{header}: inner list {inner:?} in {value:?}")
                }
            };
            let name = match item.bare_item {
                sfv::BareItem::String(name) => name,
                other => panic!("{header}: item {other:?} is not a String in {value:?}"),
            };
            let params = item
                .params
                .into_iter()
                .map(|(key, bare)| match bare {
                    sfv::BareItem::Integer(n) => (key, n),
                    other => {
                        panic!("{header}: parameter {key}={other:?} is not an Integer in {value:?}")
                    }
                })
                .collect();
            (name, params)
        })
        .collect()
}

fn param(params: &[(String, i64)], key: &str) -> Option<i64> {
    params.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// Parses `RateLimit-Policy`: items `"name";q=<limit>[;w=<seconds>]`.
pub fn parse_policy(value: &str) -> Vec<PolicyTier> {
    parse_named_items("RateLimit-Policy", value)
        .into_iter()
        .map(|(name, params)| {
            let q = param(&params, "q")
                .unwrap_or_else(|| panic!("RateLimit-Policy: no q for {name:?} in {value:?}"));
            PolicyTier {
                q,
                w: param(&params, "w"),
                name,
            }
        })
        .collect()
}

/// Parses `RateLimit`: items `"name";r=<remaining>;t=<seconds>`.
pub fn parse_ratelimit(value: &str) -> Vec<LimitTier> {
    parse_named_items("RateLimit", value)
        .into_iter()
        .map(|(name, params)| {
            let r = param(&params, "r")
                .unwrap_or_else(|| panic!("RateLimit: no r for {name:?} in {value:?}"));
            let t = param(&params, "t")
                .unwrap_or_else(|| panic!("RateLimit: no t for {name:?} in {value:?}"));
            LimitTier { name, r, t }
        })
        .collect()
}
