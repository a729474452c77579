//! The HTTP front end. Both modes make the same decision (rule, key, RL.HIT, through
//! [`crate::decider`]) and differ only in what they do with it: proxy mode forwards or
//! answers 429, check mode answers 200 or 429 to the proxy that asked.
//!
//! - `target`: the request's canonical method, and the path and query a proxy reports;
//! - `judgement`: the rules that apply, their keys, the decider's call, the metrics;
//! - `proxy` and `check`: each mode's translation of a request and of its decision;
//! - `responses`: the answers the gateway writes itself (refusals, 429, 503).

mod check;
mod judgement;
mod proxy;
mod responses;
mod target;

use crate::app::Gateway;
use crate::config::Mode;
use crate::decider::lease_guard::Leased;
use crate::upstream::UpstreamBody;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::net::IpAddr;

/// A response body: the upstream's, streamed (with the request's lease, if it holds one),
/// or one the gateway wrote.
pub(crate) type Body = Either<Leased<UpstreamBody>, Full<Bytes>>;

impl Gateway {
    /// Answers one HTTP request in the configured mode.
    pub(crate) async fn handle(&self, peer: IpAddr, request: Request<Incoming>) -> Response<Body> {
        match self.server.mode {
            Mode::Proxy => self.proxy(peer, request).await,
            Mode::Check => self.check(peer, request).await,
        }
    }
}
