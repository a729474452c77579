//! Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! over gRPC (tonic, with the messages envoy-types ships). A request's descriptors are
//! matched against the YAML descriptors ([`crate::front::envoy::descriptors`]), each match becomes an
//! [`Applied`] (its rule, its key, the request's `hits_addend`), and the decider decides
//! them as it decides stacked HTTP rules: atomically in one `RL.MHIT` for keys of one slot,
//! charged in order and given back across slots. This module only translates.
//!
//! - `hits_addend` 0 on a descriptor: `RL.PEEK` / `RL.MPEEK` (what one more hit would do;
//!   nothing counted). The request-level `hits_addend` is a plain `uint32` whose 0 means
//!   "not set": 1.
//! - `is_negative_hits`: `RL.REFUND` / `RL.MREFUND` of that many units into the current
//!   window, never above the limit; the status says what is left after it.
//! - Looks and refunds go first; when a look says an enforced descriptor is over, nothing
//!   is charged (all or nothing), else the charged descriptors are decided together.
//! - A descriptor's `limit` (Envoy's override) is as its node's `limit_override` says
//!   ([`descriptors::OverrideMode`]): by default a key of its own charged beside the node's (two answers
//!   for one descriptor, of which the weightier stands); the node's key is
//!   charged for every request, so no override value opens a fresh budget.
//! - Shadow descriptors answer OK whatever the count says; quota-mode descriptors answer
//!   their own code, OVER_LIMIT included, and make `overall_code` OVER_LIMIT only when
//!   every quota descriptor of the request is over (a look is over when no more fits).
//! - `[envoy]`'s settings ([`settings::AnswerSettings`]): a global shadow mode (the overall
//!   code always OK), a global quota mode (every descriptor a quota one; both charge each
//!   descriptor apart), envoyproxy/ratelimit's response headers and dynamic metadata, and
//!   the near-limit ratio of `rl_gateway_envoy_hits_total`.
//! - When Redis cannot decide within the deadline, each descriptor answers as its
//!   `on_failure` says: OK (fail-open, the default), OVER_LIMIT, or the whole call gRPC
//!   UNAVAILABLE (which Envoy's `failure_mode_deny` then turns into a denial or not); an
//!   error reply of the module, as its `on_module_error` says (OVER_LIMIT by default). A
//!   shadow descriptor never denies, on a failure either; a quota one reports it in its own
//!   status only.

mod answer;
pub mod descriptors;
mod execute;
pub mod grpc_listener;
mod hits;
mod limit_headers;
mod metadata;
mod plan;
pub mod settings;
#[cfg(test)]
mod tests;

pub(crate) use plan::RequestError;

use crate::app::Gateway;
use descriptors::Domains;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use execute::DescriptorRules;
use plan::{Early, Event};
use settings::AnswerSettings;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tonic::{Request, Response, Status};

/// The largest request message taken (tonic refuses a larger one before decoding it).
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// The most descriptors in one request: the most keys one `RL.MHIT` takes.
pub(crate) const MAX_DESCRIPTORS: usize = crate::rules::MAX_APPLYING;
/// The most entries in one descriptor.
pub const MAX_ENTRIES: usize = 16;
/// The longest domain, in bytes.
pub(crate) const MAX_DOMAIN_BYTES: usize = 255;
/// The longest entry key, in bytes.
pub const MAX_ENTRY_KEY_BYTES: usize = 255;
/// The longest entry value, in bytes.
pub const MAX_ENTRY_VALUE_BYTES: usize = 1024;

/// The service, sharing the HTTP front end's decider.
pub struct EnvoyService {
    gateway: Arc<Gateway>,
    loaded: RwLock<Arc<Loaded>>,
    key_prefix: String,
    settings: AnswerSettings,
}

/// The descriptors in force, with what is made of their rules on first use.
struct Loaded {
    domains: Domains,
    made: DescriptorRules,
}

impl Loaded {
    fn new(domains: Domains) -> Arc<Loaded> {
        Arc::new(Loaded {
            domains,
            made: DescriptorRules::default(),
        })
    }
}

impl EnvoyService {
    /// The service over `gateway`'s decider, answering for `domains` as `settings` say.
    pub fn new(
        gateway: Arc<Gateway>,
        domains: Domains,
        key_prefix: String,
        settings: AnswerSettings,
    ) -> Self {
        EnvoyService {
            gateway,
            loaded: RwLock::new(Loaded::new(domains)),
            key_prefix,
            settings,
        }
    }

    /// The tonic service, bounded to [`MAX_MESSAGE_BYTES`] per request.
    pub fn server(self: &Arc<Self>) -> RateLimitServiceServer<EnvoyService> {
        RateLimitServiceServer::from_arc(self.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn loaded(&self) -> Arc<Loaded> {
        self.loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Swaps in newly loaded descriptors; denials made under the old ones are forgotten.
    pub(crate) fn replace_domains(&self, domains: Domains) {
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = Loaded::new(domains);
        self.gateway.decider().forget_denials();
    }

    /// Reloads the descriptors at `path` whenever a file's name, size or modification
    /// time changes (looked at every `interval`). A set that does not load is refused,
    /// logged and counted (`rl_gateway_reloads_total{result="refused"}`); the old one
    /// stays. `merge_domains` as in [`descriptors::load`].
    pub fn spawn_reloader(
        self: &Arc<Self>,
        path: PathBuf,
        merge_domains: bool,
        interval: Duration,
    ) {
        let service = self.clone();
        tokio::spawn(async move {
            let mut seen = stamp(&path);
            loop {
                tokio::time::sleep(interval).await;
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                let metrics = service.gateway.metrics();
                match descriptors::load(&path, merge_domains) {
                    Ok(domains) => {
                        crate::logging::log!(
                            outcome = "ok";
                            "Envoy descriptors reloaded from {}: {} domains",
                            path.display(),
                            domains.len()
                        );
                        service.replace_domains(domains);
                        metrics.reload(true);
                    }
                    Err(error) => {
                        crate::logging::log!(
                            outcome = "refused";
                            "Envoy descriptors not reloaded: {error}"
                        );
                        metrics.reload(false);
                    }
                }
            }
        });
    }

    /// Decides one request: the answer, or the gRPC status to fail it with. The plan and
    /// the answer are pure; only [`execute::execute`] asks the decider.
    pub(crate) async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let loaded = self.loaded();
        let settings = &self.settings;
        let answer = match plan::plan(&loaded.domains, request, &self.key_prefix) {
            Err(Early::Invalid(problem)) => answer::invalid(&problem),
            Err(Early::UnknownDomain) => answer::unknown_domain(request, settings),
            Ok(plan) => {
                self.record(&plan.events);
                let decider = self.gateway.decider();
                let replies = execute::execute(decider, &plan, settings, &loaded.made).await;
                answer::answer(request, &plan, &replies, settings)
            }
        };
        self.record(&answer.events);
        answer.result
    }

    /// Counts `events` in the metrics.
    fn record(&self, events: &[Event]) {
        let metrics = self.gateway.metrics();
        for event in events {
            match event {
                Event::Envoy(result) => metrics.envoy(*result),
                Event::Decision(name, outcome) => metrics.decision(name, *outcome),
                Event::FailOpen(failure) => metrics.fail_open(*failure),
                Event::Hits(name, hits) => metrics.envoy_hits(name, hits),
            }
        }
    }
}

/// What tells a change of the descriptors: each file's name, size and modification time.
fn stamp(path: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let of = |p: PathBuf| {
        let meta = std::fs::metadata(&p).ok();
        let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
        let modified = meta.and_then(|m| m.modified().ok());
        (p, len, modified)
    };
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut all: Vec<_> = entries
                .filter_map(Result::ok)
                .map(|e| of(e.path()))
                .collect();
            all.sort();
            all
        }
        Err(_) => vec![of(path.to_path_buf())],
    }
}

#[tonic::async_trait]
impl RateLimitService for EnvoyService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}
