//! The Functions library (`functions/ratelimit.lua`): its path, loading it into a
//! [`Server`], calling its functions, and a server that stands in for a managed Redis (no
//! module, `MODULE` disabled).

use super::*;

/// The committed bundle that `FUNCTION LOAD` takes.
pub fn bundle_path() -> PathBuf {
    workspace_root().join("functions").join("ratelimit.lua")
}

/// The bundle's text.
pub fn bundle() -> String {
    let path = bundle_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl ServerConfig {
    /// A server as a managed service offers it: no module, and `MODULE LOAD` refused
    /// (`enable-module-command no`), so only `FUNCTION LOAD` can bring the limits.
    pub fn managed(flavor: Flavor) -> Self {
        ServerConfig::new(flavor)
            .without_module()
            .arg("enable-module-command", "no")
    }
}

impl Server {
    /// Loads (or replaces) the library; returns the library's name as the server answers.
    pub fn load_functions(&self) -> String {
        load_functions(&mut self.conn())
    }
}

/// `FUNCTION LOAD REPLACE` of the bundle on `con`.
pub fn load_functions(con: &mut Connection) -> String {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(bundle())
        .query(con)
        .expect("FUNCTION LOAD REPLACE functions/ratelimit.lua")
}

/// `FCALL name numkeys keys... args...` as a command, for [`error_text`] and raw replies.
pub fn fcall_cmd(name: &str, keys: &[&str], args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(name).arg(keys.len()).arg(keys).arg(args);
    cmd
}

/// `FCALL rl_hit 1 key args...`: the library's RL.HIT, decoded like [`hit`].
pub fn fhit(con: &mut Connection, key: &str, args: &[&str]) -> Reply {
    fcall_reply(con, "rl_hit", key, args)
}

/// A one-key function that answers RL.HIT's five integers (`rl_hit`, `rl_peek`,
/// `rl_refund`), decoded.
pub fn fcall_reply(con: &mut Connection, name: &str, key: &str, args: &[&str]) -> Reply {
    let values: Vec<i64> = fcall_cmd(name, &[key], args)
        .query(con)
        .unwrap_or_else(|e| panic!("FCALL {name} {key} {args:?}: {e}"));
    decode_reply(&values)
}
