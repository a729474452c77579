//! The gateway's state, which every front end (HTTP proxy and check modes, Envoy's gRPC
//! service), the reloader and the heartbeat share: its settings, the rules in force, the
//! decision path (which keeps the metrics) and the upstream. The front ends translate
//! requests into decisions; none of them owns this.

use crate::config::ServerSettings;
use crate::decider::Decider;
use crate::metrics::Metrics;
use crate::rules::RuleSet;
use crate::upstream::Upstream;
use std::sync::{Arc, RwLock};

pub struct Gateway {
    pub(crate) server: ServerSettings,
    pub(crate) key_prefix: String,
    pub(crate) rules: RwLock<Arc<RuleSet>>,
    /// Shared with the leases in flight, which give themselves back through it.
    pub(crate) decider: Arc<Decider>,
    pub(crate) upstream: Option<Upstream>,
}

impl Gateway {
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
        }
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

    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn replace_rules(&self, rules: RuleSet) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.decider.forget_denials();
    }
}
