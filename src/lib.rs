//! redis-ratelimit: rate limiting as one atomic server-side command for Redis and Valkey.
//!
//! This file only registers things: the commands table, the allocator and the load-time
//! checks. The logic lives in the `ratelimit-core` crate (pure, in `core/`) under `command`
//! (handlers), `policy` (named policies) and `store`. Every call into the server goes
//! through [`server`], the only place with unsafe code.

mod command;
mod command_docs;
mod config;
mod listeners;
mod metrics;
mod policy;
mod propagation;
mod reply;
pub mod server;
mod store;
mod strings;
mod version;

use command::{lease, limit, multi, reset, take, testing, throttle};
use policy::command as policy_command;
use redis_module::configuration::ConfigurationFlags;
use redis_module::{redis_module, Context, InfoContext, ModuleOptions, RedisString, Status};
use server::command::{register, register_container, Callback};
use std::ffi::CStr;

// The Redis allocator is only there inside a server; unit tests use the system one.
#[cfg(not(test))]
use redis_module::alloc::RedisAlloc as ModuleAlloc;
#[cfg(test)]
use std::alloc::System as ModuleAlloc;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let missing = server::missing_apis();
    if !missing.is_empty() {
        ctx.log_warning(&format!(
            "ratelimit: this server lacks module API functions: {}; Redis 7.0 or newer (or \
             Valkey 7.2 or newer) is required",
            missing.join(", ")
        ));
        return Status::Err;
    }
    if let Err(err) = propagation::check_commands_exist(ctx) {
        ctx.log_warning(&format!("ratelimit: cannot load: {err}"));
        return Status::Err;
    }
    // Keys are signalled as modified explicitly, only when a command really wrote them,
    // so that a denied hit does not abort another client's WATCH.
    // Loading policies from an RDB checks for I/O errors instead of aborting on them.
    ctx.set_module_options(
        ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED | ModuleOptions::HANDLE_IO_ERRORS,
    );
    let words: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    let loaded = match config::LoadArgs::parse(words) {
        Ok(loaded) => loaded,
        Err(err) => {
            ctx.log_warning(&format!("ratelimit: {err}"));
            return Status::Err;
        }
    };
    loaded.apply();
    let opted_in = config::POLICIES_IN_RDB.load(std::sync::atomic::Ordering::Relaxed);
    let persistence =
        policy::rdb::register(ctx, opted_in).and_then(|()| policy::rdb::subscribe_to_loading(ctx));
    if let Err(err) = persistence {
        ctx.log_warning(&format!("ratelimit: {err}"));
        return Status::Err;
    }
    if let Err(err) = server::events::subscribe_to_replication::<listeners::Events>(ctx) {
        ctx.log_warning(&format!("ratelimit: {err}"));
        return Status::Err;
    }
    install_panic_hook();
    strings::init();
    server::info_func::register_info::<Info>(ctx);
    let testing_commands: &[Command] = if loaded.testing {
        TESTING_COMMANDS
    } else {
        &[]
    };
    let keyed = COMMANDS
        .iter()
        .chain(testing_commands)
        .map(|c| (c, (1, 1, 1)));
    // Their keys are found by the key spec `command_docs` sets (after `numkeys`).
    let counted = SEVERAL_KEYS_COMMANDS.iter().map(|c| (c, (0, 0, 0)));
    let keyless = KEYLESS_COMMANDS.iter().map(|c| (c, (0, 0, 0)));
    for ((name, callback, flags), keys) in keyed.chain(counted).chain(keyless) {
        if let Err(err) = register(ctx, name, Some(*callback), flags, keys) {
            ctx.log_warning(&format!("ratelimit: {err}"));
            return Status::Err;
        }
    }
    let subcommands = POLICY_SUBCOMMANDS
        .iter()
        .map(|(name, callback, flags)| (*name, Some(*callback), *flags));
    if let Err(err) = register_container(ctx, POLICY_CONTAINER, subcommands) {
        ctx.log_warning(&format!("ratelimit: {err}"));
        return Status::Err;
    }
    if let Err(err) = command_docs::describe_all(ctx) {
        ctx.log_warning(&format!("ratelimit: {err}"));
        return Status::Err;
    }
    Status::Ok
}

/// A command's name, callback and flags.
type Command = (&'static CStr, Callback, &'static CStr);

/// The commands, registered in `init` with plain C callbacks (see `command`). No
/// `#[command]` macro and no ACL categories: both need Redis 7.2 APIs, and the module must
/// load on 7.0.
///
/// Flags say what a call really does (README, "Module: command flags, write pauses and
/// propagation"): `write` for every command that may write or propagate, so that the server
/// holds it during a write pause and refuses it without `min-replicas-to-write`;
/// `deny-oom` only where a call can create a key or grow one; `fast` only where a call's
/// cost is bounded by a small constant, which rules out every command that can meet
/// `ALGO log` (up to 10,000 entries decoded per call).
const COMMANDS: &[Command] = &[
    (c"RL.HIT", limit::rl_hit, c"write deny-oom"),
    (c"RL.PEEK", limit::rl_peek, c"readonly"),
    // A refund never creates a key and never lengthens a value by more than a few bytes:
    // giving units back stays possible when the server is out of memory.
    (c"RL.REFUND", limit::rl_refund, c"write"),
    (c"RL.RESET", reset::rl_reset, c"write"),
    // A partial grant counts as a hit does: it can create a key or grow one.
    (c"RL.TAKE", take::rl_take, c"write deny-oom"),
    // GCRA only, but the key may hold another algorithm's state (a log of up to 10,000
    // entries), which it decodes to count its units: not `fast`.
    (c"CL.THROTTLE", throttle::cl_throttle, c"write deny-oom"),
    // Leases (`command::lease`): a key holds up to `ratelimit.max-leases` of them, which
    // every call reads, so none is `fast`. Only an acquire can grow a key.
    (c"RL.ACQUIRE", lease::rl_acquire, c"write deny-oom"),
    (c"RL.RELEASE", lease::rl_release, c"write"),
    (c"RL.RENEW", lease::rl_renew, c"write"),
    (c"RL.LEASES", lease::rl_leases, c"readonly"),
];

/// Several keys in one atomic call: `numkeys key [key ...] SPEC rule [SPEC rule ...]`,
/// with the flags of their one-key counterparts, plus `getkeys-api`: Redis 7.0's Cluster
/// routing reads only key positions or that API, not key specs (which `COMMAND GETKEYS`
/// and ACLs read, and `command_docs` sets as well).
const SEVERAL_KEYS_COMMANDS: &[Command] = &[
    (c"RL.MHIT", multi::rl_mhit, c"write deny-oom getkeys-api"),
    (c"RL.MPEEK", multi::rl_mpeek, c"readonly getkeys-api"),
    (c"RL.MREFUND", multi::rl_mrefund, c"write getkeys-api"),
];

/// Keyless commands: they name no key, so Cluster lets any node run them.
const KEYLESS_COMMANDS: &[Command] = &[(c"RL.STATS", policy_command::rl_stats, c"fast")];

/// `RL.POLICY` is a container, so that each subcommand has its own flags: the reading ones
/// answer during a write pause and under OOM, the writing ones wait for the pause to end
/// (they propagate) and honour `min-replicas-to-write`. Every subcommand runs the same
/// handler, which reads the subcommand from the arguments as before.
const POLICY_CONTAINER: &CStr = c"RL.POLICY";
const POLICY_SUBCOMMANDS: &[Command] = &[
    (c"SET", policy_command::rl_policy, c"write deny-oom"),
    (c"DEL", policy_command::rl_policy, c"write"),
    (c"GET", policy_command::rl_policy, c"readonly fast"),
    (c"LIST", policy_command::rl_policy, c"readonly"),
    (c"HELP", policy_command::rl_policy, c"readonly fast"),
];

/// Registered only with the module argument `enable-testing-commands`.
const TESTING_COMMANDS: &[Command] = &[
    (c"RL.TESTING.PANIC", testing::rl_testing_panic, c"fast"),
    (
        c"RL.TESTING.PANIC-IN-SAVE",
        testing::rl_testing_panic_in_save,
        c"fast",
    ),
];

/// `INFO ratelimit` (see `metrics`), registered in `init` in place of the crate's default.
struct Info;

impl server::info_func::InfoSource for Info {
    fn info(ctx: &InfoContext, for_crash_report: bool) {
        // A panic must not cross into the server; INFO then just lacks the section.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            metrics::info(ctx, for_crash_report)
        }));
    }
}

/// Sends panic messages to the server log: a daemonized server has no stderr to read.
/// Handlers catch the unwind itself (see `command::run_guarded`).
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        redis_module::logging::log_warning(format!("ratelimit: panic: {info}"));
        previous(info);
    }));
}

redis_module! {
    name: "ratelimit",
    // Cargo's semantic version, packed for the server (see `version`).
    version: version::MODULE_VERSION,
    allocator: (ModuleAlloc, ModuleAlloc),
    data_types: [],
    init: init,
    commands: [],
    configurations: [
        i64: [
            ["max-window-ms", &config::MAX_WINDOW, config::DEFAULT_MAX_WINDOW_MS, 1, config::LARGEST_MAX_WINDOW_MS, ConfigurationFlags::DEFAULT, None],
            ["max-log-limit", &config::MAX_LOG, config::DEFAULT_MAX_LOG_LIMIT, 1, config::LARGEST_MAX_LOG_LIMIT, ConfigurationFlags::DEFAULT, None],
            ["max-leases", &config::MAX_LEASES_CONFIG, config::DEFAULT_MAX_LEASES, 1, config::LARGEST_MAX_LEASES, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [
            ["policies-in-rdb", &config::POLICIES_IN_RDB, false, ConfigurationFlags::IMMUTABLE, None],
            ["notify-denied", &config::NOTIFY_DENIED, false, ConfigurationFlags::DEFAULT, None],
        ],
        enum: [
            ["default-algorithm", &config::DEFAULT_ALGORITHM, config::DefaultAlgorithm::fixed, ConfigurationFlags::DEFAULT, None],
        ],
        // `config::LoadArgs` reads the load line itself, so that a word it does not know
        // or a value a config cannot take refuses the load, named in the log.
        module_args_as_configuration: false,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registration tables and `commands/*.json` give every command the same flags:
    /// the flags are chosen here, with their reasons, and described there.
    #[test]
    fn commands_are_registered_with_the_flags_they_are_described_with() {
        let described = |name: &str| {
            command_docs::DESCRIBED
                .iter()
                .find(|doc| doc.name.to_str() == Ok(name))
                .unwrap_or_else(|| panic!("{name} is described in commands/"))
                .flags
        };
        let tables = COMMANDS
            .iter()
            .chain(SEVERAL_KEYS_COMMANDS)
            .chain(KEYLESS_COMMANDS);
        let mut registered = 0;
        for (name, _, flags) in tables {
            let name = name.to_str().expect("ASCII names");
            assert_eq!(described(name), *flags, "{name}");
            registered += 1;
        }
        let container = POLICY_CONTAINER.to_str().expect("ASCII");
        assert_eq!(described(container), c"", "{container}");
        for (sub, _, flags) in POLICY_SUBCOMMANDS {
            let name = format!("{container}|{}", sub.to_str().expect("ASCII"));
            assert_eq!(described(&name), *flags, "{name}");
            registered += 1;
        }
        // Every description is of a registered command (the container aside).
        assert_eq!(registered + 1, command_docs::DESCRIBED.len());
    }
}
