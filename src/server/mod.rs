//! The server's module API behind safe types: the only place with unsafe code.
//!
//! Every call into the server (`RedisModule_*`) and every raw pointer it hands the module
//! lives here, each `unsafe` block with a `SAFETY:` comment saying why it holds; the rest
//! of the crate sees typed handles whose lifetimes make misuse a compile error:
//!
//! - [`string::ServerStr`]: a server string borrowed for a lifetime (a command's
//!   arguments, [`command::Args`], live as long as the command);
//! - [`string::ServerString`]: a string the module owns, freed on drop;
//!   [`string::KeptString`]: one made at load and kept;
//! - [`key::Key`]: a key of the running command, closed on drop;
//! - [`reply::Reply`]: the reply writer of the command's context;
//! - [`command::callback`]: the one callback every command is registered with, which
//!   wraps the server's pointers before any handler sees them.
//!
//! A `&redis_module::Context` is taken to hold the live context of the running command
//! (or of the load), as the `redis-module` crate's own safe methods take it.
//! `scripts/check-unsafe.sh` (`make lint`) fails when `unsafe` appears elsewhere in the
//! module crate.

mod api;
pub mod clock;
pub mod command;
pub mod command_info;
pub mod context;
pub mod events;
pub mod info;
pub mod info_func;
pub mod key;
pub mod rdb;
pub mod reply;
pub mod string;

pub use api::missing_apis;
