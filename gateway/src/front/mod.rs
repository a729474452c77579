//! The front ends: each translates what its clients send into the decision's input
//! ([`crate::decider::Applied`]: a rule, its key, the request's cost) and the decision
//! ([`crate::decider::Stacked`], or a look at the counts) into its own reply. Rules, the
//! deny cache, the breaker, the deadline and the Redis calls are the decider's alone, so
//! every front end decides the same way.
//!
//! - [`http`]: proxy mode (forward or 429) and check mode (200 or 429 to nginx, Traefik,
//!   ext_authz), over the TOML rules;
//! - [`envoy`]: Envoy's `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over
//!   gRPC, over envoyproxy/ratelimit's YAML descriptors ([`envoy::descriptors`]), on a
//!   listener whose connections [`envoy::grpc_listener`] bounds.

pub mod envoy;
pub(crate) mod http;
