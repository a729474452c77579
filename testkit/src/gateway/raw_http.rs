//! Requests written byte for byte, for what ureq refuses to send: lower-case or made-up
//! methods, raw UTF-8 in headers, heads of any size. One request per connection
//! (`Connection: close`), the answer read to its end.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A status and a body (de-chunked), the headers left out.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl RawAnswer {
    /// The request line the demo upstream echoed (`METHOD PATH?QUERY`).
    pub fn upstream_request_line(&self) -> &str {
        self.body.lines().next().unwrap_or("")
    }

    /// The value of a response header (first of its name), any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Sends `<method> <target> HTTP/1.1`, `Host`, the raw header lines `headers` (each
/// ending in CRLF), `Connection: close` and an empty body to `port`.
pub fn request(port: u16, method: &[u8], target: &[u8], headers: &[u8]) -> RawAnswer {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(method);
    bytes.push(b' ');
    bytes.extend_from_slice(target);
    bytes.extend_from_slice(format!(" HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n").as_bytes());
    bytes.extend_from_slice(headers);
    bytes.extend_from_slice(b"Content-Length: 0\r\nConnection: close\r\n\r\n");
    send(port, &bytes)
}

/// Sends `bytes` as they are and reads the answer.
pub fn send(port: u16, bytes: &[u8]) -> RawAnswer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    // The server may answer (431) and close before reading everything: a failed write is
    // then expected, and the answer is still there to read.
    let _ = stream.write_all(bytes);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    RawAnswer {
        status,
        head: head.to_owned(),
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}
