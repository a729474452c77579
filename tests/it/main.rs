//! The module's integration tests, one binary: real Redis and Valkey servers (7.0 and 8.1,
//! or 8.6 and 9.1 with `REDIS_SERVER` and `VALKEY_SERVER`: `make integration-newer`) with
//! the module loaded (the harness is the `testkit` crate). One file per behaviour.

mod algorithms;
mod bad_input;
mod calendar;
mod cluster;
mod command_flags;
mod command_reference;
mod commands;
mod configs;
mod conformance;
mod dist;
mod doc_examples;
mod functions_core;
mod functions_fast;
mod functions_leases;
mod functions_same_ms;
mod functions_take;
mod leases;
mod leases_integrity;
mod leases_scripts_and_replicas;
mod log_layout;
mod lost_expiry;
mod make_run_policies;
mod metrics;
mod panic_guard;
mod partial_grant;
mod peek_reset_refund;
mod persistence;
mod policy_bad_input;
mod policy_persistence;
mod policy_replication;
mod policy_rules;
mod policy_shadow;
mod propagation;
mod python_example;
mod random_traffic;
mod replication;
mod save_panic;
mod server_log;
mod several_keys;
mod several_keys_acl_and_getkeys;
mod smoke;
mod throttle;
mod unheard_writes;
mod write_pause;
