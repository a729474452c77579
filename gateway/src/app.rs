//! The gateway's state, which every front end (HTTP proxy and check modes, Envoy's gRPC
//! service), the reloader and the heartbeat share: its settings, the rules in force, the
//! decision path (which keeps the metrics) and the upstream. The front ends translate
//! requests into decisions; none of them owns this.
//!
//! It also says whether the gateway should be sent traffic (`/readyz`): the heartbeat
//! finds out whether Redis answers with the module or the Functions library, and a
//! stopping gateway is not ready while it drains.

use crate::config::ServerSettings;
use crate::decider::Decider;
use crate::metrics::Metrics;
use crate::rules::RuleSet;
use crate::upstream::Upstream;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

/// Why `/readyz` has not answered 200 yet, until the first probe of Redis has.
const NOT_PROBED: &str = "Redis not probed yet";

/// The running gateway: what every front end, the reloader and the heartbeat share.
pub struct Gateway {
    pub(crate) server: ServerSettings,
    pub(crate) key_prefix: String,
    pub(crate) rules: RwLock<Arc<RuleSet>>,
    /// Shared with the leases in flight, which give themselves back through it.
    pub(crate) decider: Arc<Decider>,
    pub(crate) upstream: Option<Upstream>,
    /// `Err(why)` while Redis does not answer or has neither backend (`[redis] backend`).
    redis_ready: RwLock<Result<(), Arc<str>>>,
    /// Set on SIGTERM: not ready any more, whatever Redis says.
    draining: AtomicBool,
}

impl Gateway {
    /// A gateway on `server`'s settings, deciding `rules` with `decider` under keys that
    /// start with `key_prefix`; not ready until the first probe of Redis.
    pub fn new(
        server: ServerSettings,
        key_prefix: String,
        rules: RuleSet,
        decider: Decider,
    ) -> Self {
        let upstream = server.upstream.clone().map(|base| {
            Upstream::new(
                base,
                server.upstream_timeout,
                server.connections.body_timeout,
            )
        });
        Gateway {
            server,
            key_prefix,
            rules: RwLock::new(Arc::new(rules)),
            decider: Arc::new(decider),
            upstream,
            redis_ready: RwLock::new(Err(NOT_PROBED.into())),
            draining: AtomicBool::new(false),
        }
    }

    /// `Ok` when the gateway should be sent traffic, else why not (one line).
    pub fn readiness(&self) -> Result<(), Arc<str>> {
        if self.draining.load(Relaxed) {
            return Err("shutting down: draining the requests in flight".into());
        }
        self.redis_ready
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the last probe of Redis found; whether that changed anything.
    pub fn set_redis_ready(&self, ready: Result<(), String>) -> bool {
        let ready = ready.map_err(Arc::<str>::from);
        let mut slot = self.redis_ready.write().unwrap_or_else(|e| e.into_inner());
        let changed = *slot != ready;
        *slot = ready;
        changed
    }

    /// From now on `/readyz` answers 503: the gateway is stopping.
    pub fn start_draining(&self) {
        self.draining.store(true, Relaxed);
    }

    /// Whether a lease is still held or being given back. Leases and their renewal and
    /// release tasks are the only holders of the decider besides this struct, so it is
    /// exact and needs no count of its own; should anything else ever hold it, a stopping
    /// gateway only waits longer (bounded by its caller) for it to let go.
    pub fn leases_pending(&self) -> bool {
        Arc::strong_count(&self.decider) > 1
    }

    /// The one decision path, which the other front ends (Envoy's gRPC service) share.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    /// The counters, kept by the decider, which counts its own work too.
    pub fn metrics(&self) -> &Metrics {
        self.decider.metrics()
    }

    /// Whether the circuit breaker skips Redis now (`rl_gateway_breaker_open`).
    pub fn breaker_open(&self) -> bool {
        self.decider.breaker_open()
    }

    /// The `[server]` settings it runs on.
    pub fn server(&self) -> &ServerSettings {
        &self.server
    }

    /// The rules in force now (a reload swaps them; a request keeps the ones it began with).
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `rules` in force and forgets the cached denials, which the old rules made.
    pub fn replace_rules(&self, rules: RuleSet) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.decider.forget_denials();
    }
}
