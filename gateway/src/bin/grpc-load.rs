//! grpc-load: the load generator of bench/envoy.py, and the gRPC server that does nothing
//! it is measured against.
//!
//!   grpc-load null <addr>                     serve ShouldRateLimit answering OK at once
//!   grpc-load grpc <addr> <conns> <seconds> <domain> <key> <value> [<key> <value>]...
//!   grpc-load http <addr> <conns> <seconds> <path> <header> <value>
//!
//! `grpc` and `http` keep `conns` requests in flight (one per connection: an HTTP/2
//! connection each for gRPC, a keep-alive HTTP/1.1 connection each for the check mode) for
//! `seconds`, then print one line: `calls=<n> seconds=<s> p50_us=<x> p99_us=<y> errors=<e>`.
//! Each `<key> <value>` pair of `grpc` is one descriptor of one entry, so that a call can
//! carry several descriptors. One thread (the current-thread runtime), so that its own cost stays the same for every
//! scenario.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use http_body_util::{BodyExt, Empty};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: grpc-load null <addr>\n       grpc-load grpc <addr> <conns> <seconds> <domain> <key> <value> [<key> <value>]...\n       grpc-load http <addr> <conns> <seconds> <path> <header> <value>";

struct Null;

#[tonic::async_trait]
impl RateLimitService for Null {
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}

/// Latencies in µs and errors of one connection's loop.
struct Tally {
    latencies: Vec<u32>,
    errors: u64,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("grpc-load: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["null", addr] => runtime.block_on(null(addr)),
        ["grpc", addr, conns, seconds, domain, pairs @ ..]
            if !pairs.is_empty() && pairs.len() % 2 == 0 =>
        {
            match (conns.parse(), seconds.parse()) {
                (Ok(c), Ok(s)) => runtime.block_on(grpc(addr, c, s, domain, pairs)),
                _ => Err(USAGE.to_owned()),
            }
        }
        ["http", addr, conns, seconds, path, header, value] => {
            match (conns.parse(), seconds.parse()) {
                (Ok(c), Ok(s)) => runtime.block_on(http(addr, c, s, path, header, value)),
                _ => Err(USAGE.to_owned()),
            }
        }
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grpc-load: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn null(addr: &str) -> Result<(), String> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| format!("not an address: {addr}"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Null))
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| e.to_string())
}

fn report(tallies: Vec<Tally>, seconds: f64) {
    let mut all: Vec<u32> = Vec::new();
    let mut errors = 0;
    for t in tallies {
        all.extend(t.latencies);
        errors += t.errors;
    }
    all.sort_unstable();
    let at = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "calls={} seconds={seconds:.3} p50_us={} p99_us={} errors={errors}",
        all.len(),
        at(0.50),
        at(0.99)
    );
}

async fn grpc(
    addr: &str,
    conns: usize,
    seconds: f64,
    domain: &str,
    pairs: &[&str],
) -> Result<(), String> {
    let descriptors = pairs
        .chunks(2)
        .map(|pair| RateLimitDescriptor {
            entries: vec![Entry {
                key: pair[0].to_owned(),
                value: pair[1].to_owned(),
            }],
            ..Default::default()
        })
        .collect();
    let request = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    };
    let mut tasks = Vec::new();
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(seconds);
    for _ in 0..conns {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let mut client = RateLimitServiceClient::new(channel);
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally {
                latencies: Vec::with_capacity(1 << 16),
                errors: 0,
            };
            while Instant::now() < end {
                let sent = Instant::now();
                match client.should_rate_limit(request.clone()).await {
                    Ok(_) => tally
                        .latencies
                        .push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX)),
                    Err(_) => tally.errors += 1,
                }
            }
            tally
        }));
    }
    let mut tallies = Vec::new();
    for t in tasks {
        tallies.push(t.await.map_err(|e| e.to_string())?);
    }
    report(tallies, started.elapsed().as_secs_f64());
    Ok(())
}

async fn http(
    addr: &str,
    conns: usize,
    seconds: f64,
    path: &str,
    header: &str,
    value: &str,
) -> Result<(), String> {
    let mut tasks = Vec::new();
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(seconds);
    for _ in 0..conns {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let (addr, path, header, value) = (
            addr.to_owned(),
            path.to_owned(),
            header.to_owned(),
            value.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally {
                latencies: Vec::with_capacity(1 << 16),
                errors: 0,
            };
            while Instant::now() < end {
                let request = hyper::Request::get(path.as_str())
                    .header("host", addr.as_str())
                    .header(header.as_str(), value.as_str())
                    .body(Empty::<bytes::Bytes>::new());
                let Ok(request) = request else {
                    tally.errors += 1;
                    break;
                };
                let sent = Instant::now();
                match sender.send_request(request).await {
                    Ok(response) => {
                        let ok = response.status().is_success();
                        let _ = response.into_body().collect().await;
                        if ok {
                            tally.latencies.push(
                                u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX),
                            );
                        } else {
                            tally.errors += 1;
                        }
                    }
                    Err(_) => {
                        tally.errors += 1;
                        break;
                    }
                }
            }
            tally
        }));
    }
    let mut tallies = Vec::new();
    for t in tasks {
        tallies.push(t.await.map_err(|e| e.to_string())?);
    }
    report(tallies, started.elapsed().as_secs_f64());
    Ok(())
}
