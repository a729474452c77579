//! rl-gateway's integration tests, one binary: the gateway and the demo upstream as real
//! processes, deciding with real Redis 7.0 and Valkey 8.1 servers (the harness is the
//! `testkit` crate, feature `gateway`). One file per behaviour.

mod admin;
mod calendar;
mod check_mode;
mod check_uri;
mod client_ip;
mod cluster;
mod concurrency;
mod concurrency_cluster;
mod concurrency_slots;
mod connections;
mod containers;
mod count_failures;
mod deny_cache;
mod doc_configs;
mod envoy_caller_input;
mod envoy_cluster;
mod envoy_failures;
mod envoy_listener;
mod envoy_overrides_and_errors;
mod envoy_python;
mod envoy_service;
mod example_login;
mod fail_closed;
mod fail_open;
mod headers;
mod heads;
mod ipv6;
mod log_flood;
mod methods;
mod misconfig;
mod nginx;
mod open_files;
mod paths;
mod proxy;
mod redis_hiccups;
mod reload;
mod request_bodies;
mod rules;
mod stacking;
mod stacking_cluster;
mod underscore_headers;
mod worker_threads;
mod xff_allocation;
