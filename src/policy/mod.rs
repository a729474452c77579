//! Named policies: the registry in memory, its record in the RDB, and the `RL.POLICY` and
//! `RL.STATS` commands that read and change it.

pub mod command;
pub mod rdb;
pub mod registry;
