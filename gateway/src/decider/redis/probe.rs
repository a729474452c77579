//! Which backend answers the gateway's calls, asked of the server (of every primary of a
//! cluster) by the heartbeat at start and again after Redis was lost or restarted:
//!
//! 1. the module, if `RL.HIT` is known (`COMMAND INFO RL.HIT`), unless `backend =
//!    "functions"`;
//! 2. else the Functions library, if `FCALL_RO rl_version 0` answers this gateway's
//!    version, unless `backend = "module"`;
//! 3. else, where no library is loaded and `functions_load = "if-missing"`, the gateway's
//!    own copy is loaded (`FUNCTION LOAD`, never `REPLACE`) and asked again;
//! 4. else nothing answers: [`Missing`] says what is missing and how to fix it.
//!
//! A library of another version is never replaced nor used: its replies may differ from
//! what this gateway reads, and gateways of two versions would mix two encodings.

use super::functions::{load_cmd, version_cmd, LIBRARY_NAME, LIBRARY_VERSION};
use super::{Backend, Link};
use crate::config::{BackendChoice, FunctionsLoad};
use crate::logging::log;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, RedisError, RedisResult, Value};
use std::fmt;

/// The backend the probe settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The module's commands.
    Module,
    /// The Functions library, of this gateway's version.
    Library,
}

/// Why no backend can answer: the reason `/readyz` gives, and (with [`Missing::fix`]) the
/// log line's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// `backend = "module"`, and `node` does not know `RL.HIT`.
    Module {
        /// Where: `the server`, or a cluster node's address.
        node: String,
    },
    /// Neither the module nor the library on `node`, and the gateway may not load it.
    Both {
        /// Where.
        node: String,
        /// `backend = "functions"`: the module would not do either.
        library_only: bool,
    },
    /// `node` holds the library at another version.
    OtherVersion {
        /// Where.
        node: String,
        /// What its `rl_version` answered.
        version: String,
    },
    /// `node` refused a call the probe needs (an ACL without `FCALL_RO` or `FUNCTION`, a
    /// server older than Functions).
    Refused {
        /// Where.
        node: String,
        /// The call.
        call: &'static str,
        /// The server's error reply.
        error: String,
    },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Module { node } => {
                write!(f, "the module is not loaded on {node}: RL.HIT unknown")
            }
            Missing::Both { node, library_only } => {
                let library = format!("the Functions library {LIBRARY_NAME} {LIBRARY_VERSION}");
                match library_only {
                    true => write!(f, "{library} is not loaded on {node}"),
                    false => write!(
                        f,
                        "neither the module (RL.HIT unknown) nor {library} is loaded on {node}"
                    ),
                }
            }
            Missing::OtherVersion { node, version } => write!(
                f,
                "{node} holds the Functions library {LIBRARY_NAME} at version {version}, and \
                 this gateway needs {LIBRARY_VERSION}"
            ),
            Missing::Refused { node, call, error } => write!(f, "{node} refused {call}: {error}"),
        }
    }
}

impl Missing {
    /// What to do about it, for the log line.
    pub fn fix(&self) -> String {
        const MODULE: &str = "load the module (redis-server --loadmodule \
             /path/to/libredis_ratelimit.so, a loadmodule line in its config file, or MODULE \
             LOAD)";
        let library = format!(
            "load the Functions library (set [redis] functions_load = \"if-missing\", or run \
             FUNCTION LOAD with the {LIBRARY_NAME}.lua of release {LIBRARY_VERSION})"
        );
        match self {
            Missing::Module { .. } => MODULE.to_owned(),
            Missing::Both {
                library_only: true, ..
            } => library,
            Missing::Both { .. } => format!("{MODULE}, or {library}"),
            Missing::OtherVersion { version, .. } => format!(
                "the gateway never replaces a library: once no gateway of version {version} \
                 uses it, run FUNCTION LOAD REPLACE with the {LIBRARY_NAME}.lua of release \
                 {LIBRARY_VERSION} (or run gateways of version {version})"
            ),
            Missing::Refused { call, .. } => format!(
                "give the gateway's ACL user {call} (and FCALL for the decisions), or {MODULE}"
            ),
        }
    }
}

/// One node's answer to a call sent to every primary: a reply, or the text of an error
/// reply.
type NodeAnswer = (String, Result<Value, String>);

/// What a node holds of the library.
enum Held {
    Ours,
    Other(String),
    Nothing,
    Refused(String),
}

impl Backend {
    /// Asks which backend the server offers (loading the library if allowed), and sends
    /// the calls that follow to it (none, while neither is usable: see
    /// [`Backend::outgoing`]). `Err` when Redis does not answer.
    pub async fn probe(&self) -> RedisResult<Result<Found, Missing>> {
        let found = self.settle().await?;
        self.answered_by(found.as_ref().ok().copied());
        Ok(found)
    }

    async fn settle(&self) -> RedisResult<Result<Found, Missing>> {
        let choice = self.answering.choice;
        if choice != BackendChoice::Functions {
            let answers = self.on_every_primary(&command_info_hit()).await?;
            match answers
                .into_iter()
                .find(|(_, answer)| !module_known(answer))
            {
                None => return Ok(Ok(Found::Module)),
                Some((node, _)) if choice == BackendChoice::Module => {
                    return Ok(Err(Missing::Module { node }))
                }
                Some(_) => {}
            }
        }
        let library_only = choice == BackendChoice::Functions;
        let held = self.library_held(library_only).await?;
        let Err(Missing::Both { node, .. }) = held else {
            return Ok(held);
        };
        if self.answering.load == FunctionsLoad::Never {
            return Ok(Err(Missing::Both { node, library_only }));
        }
        for (node, answer) in self.on_every_primary(&load_cmd()).await? {
            match answer {
                Ok(_) => log!(
                    redis_node = node;
                    "loaded the Functions library {LIBRARY_NAME} {LIBRARY_VERSION} on {node} \
                     ([redis] functions_load = \"if-missing\")"
                ),
                // Loaded by another gateway meanwhile, or another version: asked below.
                Err(error) if error.contains("already exists") => {}
                Err(error) => {
                    let call = "FUNCTION LOAD";
                    return Ok(Err(Missing::Refused { node, call, error }));
                }
            }
        }
        self.library_held(library_only).await
    }

    /// Whether every primary holds the library of this version: the first that does not
    /// is named.
    async fn library_held(&self, library_only: bool) -> RedisResult<Result<Found, Missing>> {
        let mut missing = None;
        for (node, answer) in self.on_every_primary(&version_cmd()).await? {
            match held(answer) {
                Held::Ours => {}
                Held::Other(version) => return Ok(Err(Missing::OtherVersion { node, version })),
                Held::Refused(error) => {
                    let call = "FCALL_RO";
                    return Ok(Err(Missing::Refused { node, call, error }));
                }
                Held::Nothing => {
                    missing.get_or_insert(Missing::Both { node, library_only });
                }
            }
        }
        Ok(missing.map_or(Ok(Found::Library), Err))
    }

    /// `cmd` on the server, or on every primary of a cluster: each one's answer, an error
    /// reply among them. `Err` when a node does not answer at all.
    async fn on_every_primary(&self, cmd: &Cmd) -> RedisResult<Vec<NodeAnswer>> {
        const SERVER: &str = "the server";
        let connection = match &self.link {
            Link::Cluster(slot) => slot.read().unwrap_or_else(|e| e.into_inner()).clone(),
            Link::Single(..) | Link::Located(_) => {
                return match self.call(cmd).await {
                    Ok(value) => Ok(vec![(SERVER.to_owned(), Ok(value))]),
                    Err(error) => match error_reply(&error) {
                        Some(text) => Ok(vec![(SERVER.to_owned(), Err(text))]),
                        None => Err(error),
                    },
                };
            }
        };
        let Some(mut connection) = connection else {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "no connection to the Redis Cluster yet",
            )));
        };
        // No response policy: the cluster client answers with each primary's reply, by
        // its address.
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        match connection.route_command(cmd.clone(), routing).await? {
            Value::Map(answers) => Ok(answers.into_iter().map(node_answer).collect()),
            other => Ok(vec![(SERVER.to_owned(), Ok(other))]),
        }
    }
}

/// One `(address, reply)` entry of a reply from every primary.
fn node_answer((node, answer): (Value, Value)) -> NodeAnswer {
    let node = match node {
        Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Value::SimpleString(text) => text,
        other => format!("{other:?}"),
    };
    let answer = match answer {
        Value::ServerError(error) => Err(match error.details() {
            Some(details) => format!("{} {details}", error.code()),
            None => error.code().to_owned(),
        }),
        value => Ok(value),
    };
    (node, answer)
}

/// The text of an error reply (`ERR Function not found`), `None` for an error without
/// one (no connection).
fn error_reply(error: &RedisError) -> Option<String> {
    let code = error.code()?;
    if error.is_io_error() || error.is_connection_dropped() {
        return None;
    }
    Some(match error.detail() {
        Some(detail) => format!("{code} {detail}"),
        None => code.to_owned(),
    })
}

/// Whether an error reply says that the function called does not exist.
pub(crate) fn says_no_library(error: &RedisError) -> bool {
    error
        .detail()
        .is_some_and(|detail| detail.to_ascii_lowercase().contains("function not found"))
}

/// `COMMAND INFO RL.HIT`: one entry, nil when the server does not know the command.
fn command_info_hit() -> Cmd {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg("RL.HIT");
    cmd
}

/// Whether an answer to `COMMAND INFO RL.HIT` describes the command (an error reply, a
/// server that will not say, counts as no).
fn module_known(answer: &Result<Value, String>) -> bool {
    match answer {
        Ok(Value::Array(entries)) => entries
            .first()
            .is_some_and(|entry| !matches!(entry, Value::Nil)),
        _ => false,
    }
}

/// What an answer to `FCALL_RO rl_version 0` says of the library.
fn held(answer: Result<Value, String>) -> Held {
    let version = match answer {
        Ok(Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(Value::SimpleString(text)) => text,
        Ok(other) => return Held::Other(format!("{other:?}")),
        // Redis and Valkey: `ERR Function not found`.
        Err(error) if error.to_ascii_lowercase().contains("function not found") => {
            return Held::Nothing
        }
        Err(error) => return Held::Refused(error),
    };
    match version == LIBRARY_VERSION {
        true => Held::Ours,
        false => Held::Other(version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_info_tells_a_known_command_from_an_unknown_one() {
        let known = Value::Array(vec![Value::Array(vec![Value::BulkString(
            b"rl.hit".to_vec(),
        )])]);
        assert!(module_known(&Ok(known)));
        assert!(!module_known(&Ok(Value::Array(vec![Value::Nil]))));
        assert!(!module_known(&Ok(Value::Array(vec![]))));
        assert!(!module_known(&Err("NOPERM no permissions".into())));
    }

    #[test]
    fn the_version_answer_says_what_is_loaded() {
        let ours = Value::BulkString(LIBRARY_VERSION.as_bytes().to_vec());
        assert!(matches!(held(Ok(ours)), Held::Ours));
        let other = Value::BulkString(b"0.0.1".to_vec());
        assert!(matches!(held(Ok(other)), Held::Other(v) if v == "0.0.1"));
        let none = Err("ERR Function not found".to_owned());
        assert!(matches!(held(none), Held::Nothing));
        let acl = Err("NOPERM this user has no permissions".to_owned());
        assert!(matches!(held(acl), Held::Refused(e) if e.starts_with("NOPERM")));
    }

    #[test]
    fn each_reason_names_both_fixes_where_both_would_do() {
        let node = "the server".to_owned();
        let both = Missing::Both {
            node: node.clone(),
            library_only: false,
        };
        assert!(both.to_string().contains("neither the module"), "{both}");
        assert!(both.fix().contains("--loadmodule"), "{}", both.fix());
        assert!(both.fix().contains("functions_load"), "{}", both.fix());
        let library_only = Missing::Both {
            node: node.clone(),
            library_only: true,
        };
        assert!(!library_only.fix().contains("--loadmodule"));
        let module = Missing::Module { node: node.clone() };
        assert!(module.to_string().contains("RL.HIT unknown"));
        assert!(!module.fix().contains("functions_load"));
        let other = Missing::OtherVersion {
            node,
            version: "0.0.1".into(),
        };
        assert!(other.to_string().contains("0.0.1"), "{other}");
        assert!(other.fix().contains("never replaces"), "{}", other.fix());
    }
}
