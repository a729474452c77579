//! A trivial upstream for the demo, the tests and the benchmark. Every request is answered
//! with the status in its `status` query parameter (200 without one), after the
//! milliseconds in `delay_ms` if given, with a body that echoes what arrived:
//! `METHOD path?query`, then one `name: value` line per header.
//! `GET /__requests` answers how many requests it has served (itself not counted).

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The number after `prefix` (e.g. `status=`) in the query string.
fn query_number(request: &Request<Incoming>, prefix: &str) -> Option<u64> {
    request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix(prefix))
        .and_then(|n| n.parse().ok())
}

fn answer(served: &AtomicU64, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.uri().path() == "/__requests" {
        return Response::new(Full::new(Bytes::from(served.load(Relaxed).to_string())));
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
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let served = served.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let delay = query_number(&request, "delay_ms=").unwrap_or(0);
                let response = answer(&served, &request);
                async move {
                    if delay > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                    }
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
