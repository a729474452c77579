//! What the local quota tests read: the partial grants (`RL.TAKE`), hits and refunds
//! (`RL.REFUND`) a gateway sent, how many units a key's window counts, and a gateway that
//! must refuse its file at start.

use super::*;

/// `RL.TAKE` calls the server has run so far (0 before the first).
pub fn take_calls(server: &Server) -> i64 {
    server.command_calls("RL.TAKE").unwrap_or(0)
}

/// The calls that decide a request the server has run so far: `RL.TAKE`, and `RL.HIT` or
/// `RL.MHIT` (a key too quiet to batch is charged as without local quota).
pub fn decision_calls(server: &Server) -> i64 {
    ["RL.TAKE", "RL.HIT", "RL.MHIT"]
        .iter()
        .map(|command| server.command_calls(command).unwrap_or(0))
        .sum()
}

/// `RL.REFUND` calls the server has run so far (0 before the first).
pub fn refund_calls(server: &Server) -> i64 {
    server.command_calls("RL.REFUND").unwrap_or(0)
}

/// The units `key` counts now under the one-tier `spec` (`"50 1d ALGO fixed"`), read with
/// `RL.PEEK`, which writes nothing: the limit less what a hit would leave, less that hit
/// when it would be allowed. For a bucket, the units it lacks to be full.
pub fn units_counted(server: &Server, key: &str, spec: &str) -> i64 {
    units_counted_on(&mut server.conn(), key, spec)
}

/// [`units_counted`] on a connection of the caller's, for a test that reads it often.
pub fn units_counted_on(con: &mut redis::Connection, key: &str, spec: &str) -> i64 {
    let look = crate::rl(con, "RL.PEEK", key.as_bytes(), spec);
    look.limit - look.remaining - i64::from(look.allowed)
}

/// Starts `rl-gateway --config <path>`, which must refuse the file and exit within
/// [`START_LIMIT`]; its output. A gateway still running then is killed and the test fails,
/// so a file that is wrongly accepted cannot hang the run.
pub fn refused_start(path: &Path) -> Output {
    let mut child = Command::new(gateway_binary())
        .arg("--config")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rl-gateway starts");
    let deadline = Instant::now() + START_LIMIT;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child
                .wait_with_output()
                .expect("the killed gateway's output");
            panic!(
                "rl-gateway started on {} instead of refusing it: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("the gateway's output")
}
