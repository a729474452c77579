//! A trivial upstream for the demo, the tests and the benchmark. Every request is answered
//! with the status in its `status` query parameter (200 without one), after the
//! milliseconds in `delay_ms` if given, with a body that echoes what arrived:
//! `METHOD path?query`, then one `name: value` line per header.
//! `GET /__requests` answers how many requests it has served (itself not counted), and
//! `GET /__broken_bodies` how many `read_body=1` bodies broke off before their end (their
//! connection closed mid-body: what a gateway that gives up on a body makes the upstream see).
//!
//! For the tests of requests in flight:
//! - `hold=1`: the answer waits until `GET /__release` is asked (after the request came);
//! - `drip_ms=M&chunks=N`: the head at once, then a body of N chunks, one every M ms (the
//!   first at once), so that a response stays in progress for a while; each chunk is
//!   `drip\n`, or `chunk_bytes=B` bytes of it repeated (a large answer that fills buffers);
//!   `abort_after=K`: the body breaks off after K chunks (the connection is cut mid-body);
//! - `read_body=1`: the whole request body is read before answering (as most APIs do), and
//!   the echo ends with a `body: <bytes>` line.

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::fmt::Write;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;

/// A body of `left` chunks, one each time `every` has passed; when `abort_after` chunks
/// have gone, an error instead, which makes hyper cut the connection mid-body.
struct Drip {
    left: u64,
    every: Duration,
    next: Pin<Box<tokio::time::Sleep>>,
    chunk: Bytes,
    abort_after: Option<u64>,
}

impl Body for Drip {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        if self.next.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        if let Some(after) = &mut self.abort_after {
            if *after == 0 {
                return Poll::Ready(Some(Err(std::io::Error::other("abort_after"))));
            }
            *after -= 1;
        }
        self.left -= 1;
        let at = tokio::time::Instant::now() + self.every;
        self.next.as_mut().reset(at);
        Poll::Ready(Some(Ok(Frame::data(self.chunk.clone()))))
    }
}

/// The number after `prefix` (e.g. `status=`) in the query string.
fn query_number<B>(request: &Request<B>, prefix: &str) -> Option<u64> {
    request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix(prefix))
        .and_then(|n| n.parse().ok())
}

fn answer<B>(
    served: &AtomicU64,
    broken: &AtomicU64,
    releases: &watch::Sender<u64>,
    request: &Request<B>,
    body_bytes: Option<usize>,
) -> Response<Full<Bytes>> {
    if request.uri().path() == "/__requests" {
        return Response::new(Full::new(Bytes::from(served.load(Relaxed).to_string())));
    }
    if request.uri().path() == "/__broken_bodies" {
        return Response::new(Full::new(Bytes::from(broken.load(Relaxed).to_string())));
    }
    if request.uri().path() == "/__release" {
        releases.send_modify(|n| *n += 1);
        return Response::new(Full::new(Bytes::from_static(b"released\n")));
    }
    served.fetch_add(1, Relaxed);
    let status = query_number(request, "status=")
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let target = request.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let mut body = format!("{} {target}\n", request.method());
    for (name, value) in request.headers() {
        let _ = writeln!(
            body,
            "{name}: {}",
            String::from_utf8_lossy(value.as_bytes())
        );
    }
    if let Some(bytes) = body_bytes {
        let _ = writeln!(body, "body: {bytes}");
    }
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listen = match args.as_slice() {
        [flag, address] if flag == "--listen" => address.clone(),
        _ => {
            eprintln!("usage: demo-upstream --listen 127.0.0.1:9000");
            std::process::exit(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("demo-upstream: cannot listen on {listen}: {error}");
            std::process::exit(1);
        }
    };
    eprintln!("demo-upstream: listening on {listen}");
    let served = Arc::new(AtomicU64::new(0));
    let broken = Arc::new(AtomicU64::new(0));
    let releases = Arc::new(watch::channel(0u64).0);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let served = served.clone();
        let broken = broken.clone();
        let releases = releases.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let delay = query_number(&request, "delay_ms=").unwrap_or(0);
                // Subscribed before the request is counted as served, so that a release
                // asked once it is counted always reaches it.
                let mut released = releases.subscribe();
                let hold = query_number(&request, "hold=").is_some_and(|h| h != 0);
                let read_body = query_number(&request, "read_body=").is_some_and(|r| r != 0);
                let drip = query_number(&request, "drip_ms=").map(|every| {
                    let chunk = match query_number(&request, "chunk_bytes=") {
                        Some(size) => Bytes::from(
                            b"drip\n"
                                .iter()
                                .copied()
                                .cycle()
                                .take(usize::try_from(size).unwrap_or(5).clamp(1, 1 << 20))
                                .collect::<Vec<u8>>(),
                        ),
                        None => Bytes::from_static(b"drip\n"),
                    };
                    Drip {
                        left: query_number(&request, "chunks=").unwrap_or(1),
                        every: Duration::from_millis(every),
                        next: Box::pin(tokio::time::sleep(Duration::ZERO)),
                        chunk,
                        abort_after: query_number(&request, "abort_after="),
                    }
                });
                let served = served.clone();
                let broken = broken.clone();
                let releases = releases.clone();
                async move {
                    let response = if read_body {
                        let (parts, body) = request.into_parts();
                        // A body that breaks off is answered with what arrived.
                        let bytes = match body.collect().await {
                            Ok(collected) => collected.to_bytes().len(),
                            Err(_) => {
                                broken.fetch_add(1, Relaxed);
                                0
                            }
                        };
                        answer(
                            &served,
                            &broken,
                            &releases,
                            &Request::from_parts(parts, ()),
                            Some(bytes),
                        )
                    } else {
                        answer(&served, &broken, &releases, &request, None)
                    };
                    if delay > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                    }
                    if hold {
                        released.borrow_and_update();
                        let _ = released.changed().await;
                    }
                    let response = match drip {
                        Some(drip) => {
                            let (parts, _) = response.into_parts();
                            Response::from_parts(parts, Either::Right(drip))
                        }
                        None => response.map(Either::Left),
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
