//! rl-gateway: the rate limiter in front of an API. Each request is matched to a rule,
//! charged to its client's budget with one RL.HIT, and forwarded or answered 429; when
//! Redis cannot answer in time the request goes through (fail-open) unless its rule says
//! otherwise. See the README's gateway section and gateway/rules.example.toml.

use clap::{ArgGroup, Parser};
use rl_gateway::app::Gateway;
use rl_gateway::decider::redis::Backend;
use rl_gateway::front::envoy::{descriptors, grpc_listener, EnvoyService};
use rl_gateway::logging::{self, log, log_error, log_warn, LogFormat};
use rl_gateway::net::listen::{ListenAddress, ListenError};
use rl_gateway::net::server::{self, Shutdown};
use rl_gateway::{config, decider, healthcheck, reload};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::signal::unix::{self, Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Every request allocates (hyper's heads, the Redis command and reply, the key, the
/// RateLimit fields) and frees it again a moment later, on one thread: mimalloc's per-thread
/// free lists do that for less than glibc's malloc (see gateway/Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long a starting gateway waits for Redis before it serves anyway (failing open).
const STARTUP_WAIT: Duration = Duration::from_secs(1);

/// How long a stopping gateway waits for the leases of the requests it drained to be given
/// back: each release is one call under its own deadline (1 s at least), all sent at once.
const LEASE_WAIT: Duration = Duration::from_secs(5);

/// How long the admin listener may take to finish its last answers (`/metrics` scraped as
/// the gateway stops): they take no time of their own.
const ADMIN_DRAIN: Duration = Duration::from_secs(1);

/// The version `--version` prints: the package's and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RL_GATEWAY_COMMIT"),
    ")"
);

/// A rate limiter in front of an API, deciding with the redis-ratelimit module (or its
/// Functions library, where the server cannot load modules).
///
/// Serves with --config FILE, or checks a file with --check-config FILE. Log lines go to
/// stderr; RL_LOG (or --log-level) filters them: warn, info,rl_gateway::heartbeat=warn...
/// On SIGTERM or SIGINT the listeners close, the requests in flight have --drain-seconds to
/// finish, their leases are given back, and it exits 0; a second signal stops it at once.
///
/// `rl-gateway healthcheck` asks a running gateway's admin listener instead (the probe of
/// a container image that has no shell).
#[derive(Parser, Debug)]
#[command(name = "rl-gateway", version = VERSION, arg_required_else_help = true)]
#[command(group(ArgGroup::new("mode").required(true).args(["config", "check_config"])))]
#[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Subcommand>,
    /// Serves with the rules and settings of FILE, reloaded when it changes.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Loads FILE (and its Envoy descriptor files) as a start would, says what it holds,
    /// and exits: 0 when it is valid, 1 when not.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
    /// How log lines are written.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Which log lines are written, in RL_LOG's syntax; wins over RL_LOG [default: info].
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// On SIGTERM or SIGINT, how long the requests in flight may take to finish before
    /// they are cut.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    drain_seconds: u64,
}

/// What rl-gateway does besides serving and checking a file.
#[derive(clap::Subcommand, Debug)]
enum Subcommand {
    /// GETs a running gateway's /healthz (or /readyz with --ready) on its admin listener:
    /// exits 0 when it answers 200, 1 otherwise, saying why. For container health checks.
    Healthcheck {
        /// The admin listener's URL: plain http, as admin_listen serves it.
        #[arg(long, value_name = "URL", default_value = healthcheck::DEFAULT_URL,
              value_parser = healthcheck::Target::parse)]
        url: healthcheck::Target,
        /// Asks /readyz (Redis answers and the module is loaded) instead of the URL's path.
        #[arg(long)]
        ready: bool,
        /// How long the whole exchange may take before it counts as a failure.
        #[arg(long, value_name = "MS", default_value_t = 2000)]
        timeout_ms: u64,
    },
}

fn main() -> ExitCode {
    // Usage errors exit 2, --help and --version 0 (clap's own codes).
    let cli = Cli::parse();
    if let Some(Subcommand::Healthcheck {
        url,
        ready,
        timeout_ms,
    }) = &cli.command
    {
        let target = if *ready {
            url.with_path(healthcheck::READY_PATH)
        } else {
            url.clone()
        };
        let healthy = healthcheck::run(&target, Duration::from_millis(*timeout_ms));
        return if healthy {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    match (&cli.config, &cli.check_config) {
        (_, Some(path)) => check_config(path),
        (Some(path), None) => run(path.clone(), &cli),
        // The group above makes one of them required.
        (None, None) => ExitCode::from(2),
    }
}

/// Loads the file and its Envoy descriptors as a start would, and says what they hold.
fn check_config(file: &Path) -> ExitCode {
    let path = file.display();
    let loaded = config::load(file)
        .map_err(|e| e.to_string())
        .and_then(|config| {
            let domains = match &config.envoy {
                Some(envoy) => Some(
                    descriptors::load(&envoy.descriptors, envoy.merge_domains)
                        .map_err(|e| e.to_string())?,
                ),
                None => None,
            };
            Ok((config, domains))
        });
    match loaded {
        Ok((config, domains)) => {
            let count = config.rules.count();
            match domains {
                Some(d) => println!(
                    "{path}: valid, {count} rules, {} Envoy domains with {} limits",
                    d.len(),
                    d.limit_count()
                ),
                None => println!("{path}: valid, {count} rules"),
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{path}: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: PathBuf, cli: &Cli) -> ExitCode {
    if let Err(error) = logging::init(cli.log_format, cli.log_level.as_deref()) {
        eprintln!("rl-gateway: {error}");
        return ExitCode::from(2);
    }
    log!("rl-gateway {VERSION}");
    let config = match config::load(&path) {
        Ok(config) => config,
        Err(error) => {
            log_error!("{}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    };
    rl_gateway::net::connection_limits::raise_open_file_limit(&config.server.connections);
    // One thread: the single-threaded runtime (see ServerSettings::threads), which the
    // multi-threaded one with one worker only costs more than.
    let threads = config.server.threads();
    let mut builder = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            log_error!("cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let drain = Duration::from_secs(cli.drain_seconds);
    let served = runtime.block_on(serve(path, config, drain));
    // What is left (the heartbeat, the reloader, a file read) is dropped, not waited for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    match served {
        Ok(Stopped::Drained) => {
            log!("stopped");
            ExitCode::SUCCESS
        }
        Ok(Stopped::AtOnce) => ExitCode::FAILURE,
        Err(error) => {
            log_error!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// How the gateway stopped.
enum Stopped {
    /// Requests drained and leases given back (or given up on after the drain time).
    Drained,
    /// A second signal came before that was done.
    AtOnce,
}

/// Why the gateway could not start serving.
#[derive(Debug)]
enum StartError {
    /// The Envoy descriptor files did not load.
    Descriptors(String),
    /// The Redis settings cannot make a client.
    Redis(String),
    /// A listening address does not resolve or cannot be bound.
    Listen(ListenError),
    /// SIGTERM or SIGINT cannot be waited for.
    Signal(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Descriptors(error) | StartError::Redis(error) => f.write_str(error),
            StartError::Listen(error) => error.fmt(f),
            StartError::Signal(error) => write!(f, "cannot listen for SIGTERM or SIGINT: {error}"),
        }
    }
}

impl std::error::Error for StartError {}

async fn bind(address: &ListenAddress) -> Result<TcpListener, StartError> {
    address.bind().await.map_err(StartError::Listen)
}

/// SIGTERM (what a deploy or an orchestrator sends) and SIGINT (Ctrl-C).
struct Signals {
    terminate: Signal,
    interrupt: Signal,
}

impl Signals {
    fn new() -> Result<Self, StartError> {
        Ok(Signals {
            terminate: unix::signal(SignalKind::terminate()).map_err(StartError::Signal)?,
            interrupt: unix::signal(SignalKind::interrupt()).map_err(StartError::Signal)?,
        })
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

/// What a started gateway runs, and what stops it.
struct Running {
    gateway: Arc<Gateway>,
    /// Stops the listeners that take requests (the main one and Envoy's).
    stop_serving: watch::Sender<bool>,
    /// Stops the admin listener, which answers until the end.
    stop_admin: watch::Sender<bool>,
    main: JoinHandle<()>,
    admin: JoinHandle<()>,
    envoy: Option<JoinHandle<()>>,
}

/// Starts, serves until SIGTERM or SIGINT, then stops gracefully (see [`stop`]), or at
/// once on a second signal.
async fn serve(
    path: PathBuf,
    config: config::Config,
    drain: Duration,
) -> Result<Stopped, StartError> {
    // Listened for before anything starts: a signal during the start is not lost.
    let mut signals = Signals::new()?;
    let running = start(path, config, drain).await?;
    let first = signals.next().await;
    log!(
        "{first}: stopping; the listeners close, requests in flight have {} s to finish \
         (a second signal stops at once)",
        drain.as_secs_f64()
    );
    tokio::select! {
        () = stop(running, drain) => Ok(Stopped::Drained),
        second = signals.next() => {
            log_warn!("{second} again: stopping at once, requests in flight cut");
            Ok(Stopped::AtOnce)
        }
    }
}

/// Stops gracefully: `/readyz` says so, the listeners close and drain for up to `drain`,
/// the leases of the requests drained (or cut) are given back, and the admin listener
/// closes last.
async fn stop(running: Running, drain: Duration) {
    let Running {
        gateway,
        stop_serving,
        stop_admin,
        main,
        admin,
        envoy,
    } = running;
    gateway.start_draining();
    let _ = stop_serving.send(true);
    let envoy_drained = async {
        let Some(task) = envoy else { return };
        let abort = task.abort_handle();
        if tokio::time::timeout(drain, task).await.is_err() {
            log_warn!("Envoy gRPC listener: the drain time is over, cutting its calls");
            abort.abort();
        }
    };
    let _ = tokio::join!(main, envoy_drained);
    give_back_leases(&gateway).await;
    // Units of local quota held: another gateway's at once rather than at their window's end.
    gateway.decider().give_back_held().await;
    let _ = stop_admin.send(true);
    let _ = admin.await;
}

/// Waits for the leases still held or being given back, up to [`LEASE_WAIT`].
async fn give_back_leases(gateway: &Gateway) {
    if !gateway.leases_pending() {
        log!("every lease given back");
        return;
    }
    log!("giving back the leases still held");
    let given_back = async {
        // A poll: a release is a spawned task that reports to nobody in particular.
        while gateway.leases_pending() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    match tokio::time::timeout(LEASE_WAIT, given_back).await {
        Ok(()) => log!("every lease given back"),
        Err(_) => log_warn!(
            "leases not given back within {} s: they end by their lease_ttl",
            LEASE_WAIT.as_secs()
        ),
    }
}

/// Connects, binds every listener and starts the background tasks.
async fn start(
    path: PathBuf,
    config: config::Config,
    drain: Duration,
) -> Result<Running, StartError> {
    // The descriptors first: a file that does not load stops the start, as a bad TOML does.
    let domains = match &config.envoy {
        Some(envoy) => Some(
            descriptors::load(&envoy.descriptors, envoy.merge_domains)
                .map_err(|e| StartError::Descriptors(e.to_string()))?,
        ),
        None => None,
    };
    let backend = Backend::connect(&config.redis).map_err(|e| StartError::Redis(e.to_string()))?;
    if !backend.wait_ready(STARTUP_WAIT).await {
        log_warn!("Redis does not answer yet; decisions fail open until it does");
    } else {
        first_probe(&backend).await;
    }
    let decider = decider::Decider::new(backend.clone(), &config.redis, config.deny_cache_capacity)
        .with_quota_settings(config.local_quota);
    let gateway = Arc::new(Gateway::new(
        config.server.clone(),
        config.redis.key_prefix.clone(),
        config.rules.clone(),
        decider,
    ));
    let listener = bind(&config.server.listen).await?;
    let admin = bind(&config.server.admin_listen).await?;
    log!(
        "listening on {} ({:?} mode, {} threads), admin on {}; rules from {}",
        config.server.listen,
        config.server.mode,
        config.server.threads(),
        config.server.admin_listen,
        path.display()
    );
    let (stop_serving, serving) = watch::channel(false);
    let (stop_admin, admin_serving) = watch::channel(false);
    let shutdown = |stop, drain, name| Shutdown { stop, drain, name };
    let admin = tokio::spawn(server::serve(
        admin,
        gateway.clone(),
        server::admin_handler,
        shutdown(admin_serving, ADMIN_DRAIN, "admin"),
    ));
    let main = tokio::spawn(server::serve(
        listener,
        gateway.clone(),
        server::main_handler,
        shutdown(serving.clone(), drain, "main"),
    ));
    let envoy = match (&config.envoy, domains) {
        (Some(envoy), Some(domains)) => {
            Some(serve_envoy(envoy, domains, &config, gateway.clone(), serving).await?)
        }
        _ => None,
    };
    // Its first beat, at once, probes which backend is there (`/readyz`).
    rl_gateway::heartbeat::spawn(
        gateway.clone(),
        backend.clone(),
        config.redis.key_prefix.clone(),
        config.redis.heartbeat,
    );
    reload::spawn(
        reload::RuleSource::new(path, config),
        backend,
        gateway.clone(),
    );
    Ok(Running {
        gateway,
        stop_serving,
        stop_admin,
        main,
        admin,
        envoy,
    })
}

/// Which backend answers, asked before the first request: with the library, a module
/// command sent before the heartbeat's first probe would fail. What it finds is reported
/// (and logged) by that probe, which asks again.
async fn first_probe(backend: &Backend) {
    let _ = tokio::time::timeout(STARTUP_WAIT, backend.probe()).await;
}

/// Binds the Envoy gRPC listener and serves `ShouldRateLimit` on it, its descriptor files
/// reloaded when they change, until `stop` turns true.
async fn serve_envoy(
    envoy: &config::EnvoySettings,
    domains: descriptors::Domains,
    config: &config::Config,
    gateway: Arc<Gateway>,
    mut stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, StartError> {
    let listener = bind(&envoy.listen).await?;
    log!(
        "Envoy rate limit service (gRPC) on {}: {} domains from {}",
        envoy.listen,
        domains.len(),
        envoy.descriptors.display()
    );
    let service = Arc::new(EnvoyService::new(
        gateway,
        domains,
        config.redis.key_prefix.clone(),
        envoy.answer.clone(),
    ));
    service.spawn_reloader(
        envoy.descriptors.clone(),
        envoy.merge_domains,
        config.server.reload_interval,
    );
    let limits = envoy.limits;
    let incoming = grpc_listener::incoming(listener, limits);
    Ok(tokio::spawn(async move {
        // tonic closes the listener and lets the calls in flight finish.
        let stopped = async move {
            let _ = stop.wait_for(|stop| *stop).await;
            log!("Envoy gRPC listener closed; draining its calls in flight");
        };
        let served = grpc_listener::server_builder(limits)
            .add_service(service.server())
            .serve_with_incoming_shutdown(incoming, stopped)
            .await;
        match served {
            Ok(()) => log!("Envoy gRPC listener drained"),
            Err(error) => log_error!("the Envoy gRPC listener stopped: {error}"),
        }
    }))
}
