//! rl-gateway: the rate limiter in front of an API. Each request is matched to a rule,
//! charged to its client's budget with one RL.HIT, and forwarded or answered 429; when
//! Redis cannot answer in time the request goes through (fail-open) unless its rule says
//! otherwise. See the README's gateway section and gateway/rules.example.toml.

use rl_gateway::app::Gateway;
use rl_gateway::decider::redis::Backend;
use rl_gateway::front::envoy::{descriptors, grpc_listener, EnvoyService};
use rl_gateway::logging::log;
use rl_gateway::net::server;
use rl_gateway::{config, decider, reload};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::signal::unix;

/// Every request allocates (hyper's heads, the Redis command and reply, the key, the
/// RateLimit fields) and frees it again a moment later, on one thread: mimalloc's per-thread
/// free lists do that for less than glibc's malloc (see gateway/Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long a starting gateway waits for Redis before it serves anyway (failing open).
const STARTUP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

const USAGE: &str =
    "usage: rl-gateway --config <rules.toml>\n       rl-gateway --check-config <rules.toml>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--config", path] => run(PathBuf::from(path)),
        ["--check-config", path] => check_config(path),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Loads the file and its Envoy descriptors as a start would, and says what they hold.
fn check_config(path: &str) -> ExitCode {
    let loaded = config::load(path.as_ref())
        .map_err(|e| e.to_string())
        .and_then(|config| {
            let domains = match &config.envoy {
                Some(envoy) => {
                    Some(descriptors::load(&envoy.descriptors).map_err(|e| e.to_string())?)
                }
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

fn run(path: PathBuf) -> ExitCode {
    let config = match config::load(&path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("rl-gateway: {}: {error}", path.display());
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
            eprintln!("rl-gateway: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(path, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            log!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// Why the gateway could not start serving.
#[derive(Debug)]
enum StartError {
    /// The Envoy descriptor files did not load.
    Descriptors(String),
    /// The Redis settings cannot make a client.
    Redis(String),
    /// A listening address cannot be bound.
    Listen {
        address: SocketAddr,
        error: std::io::Error,
    },
    /// SIGTERM cannot be waited for.
    Signal(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Descriptors(error) | StartError::Redis(error) => f.write_str(error),
            StartError::Listen { address, error } => {
                write!(f, "cannot listen on {address}: {error}")
            }
            StartError::Signal(error) => write!(f, "cannot listen for SIGTERM: {error}"),
        }
    }
}

impl std::error::Error for StartError {}

async fn bind(address: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(address)
        .await
        .map_err(|error| StartError::Listen { address, error })
}

/// Connects, binds every listener, starts the background tasks, and serves until SIGTERM
/// or Ctrl-C.
async fn serve(path: PathBuf, config: config::Config) -> Result<(), StartError> {
    // The descriptors first: a file that does not load stops the start, as a bad TOML does.
    let domains = match &config.envoy {
        Some(envoy) => Some(
            descriptors::load(&envoy.descriptors)
                .map_err(|e| StartError::Descriptors(e.to_string()))?,
        ),
        None => None,
    };
    let backend =
        Backend::connect(&config.redis.target).map_err(|e| StartError::Redis(e.to_string()))?;
    if !backend.wait_ready(STARTUP_WAIT).await {
        log!("Redis does not answer yet; decisions fail open until it does");
    }
    let decider = decider::Decider::new(backend.clone(), &config.redis, config.deny_cache_capacity);
    let gateway = Arc::new(Gateway::new(
        config.server.clone(),
        config.redis.key_prefix.clone(),
        config.rules.clone(),
        decider,
    ));
    let listener = bind(config.server.listen).await?;
    let admin = bind(config.server.admin_listen).await?;
    log!(
        "listening on {} ({:?} mode, {} threads), admin on {}; rules from {}",
        config.server.listen,
        config.server.mode,
        config.server.threads(),
        config.server.admin_listen,
        path.display()
    );
    tokio::spawn(server::serve(admin, gateway.clone(), server::admin_handler));
    tokio::spawn(server::serve(
        listener,
        gateway.clone(),
        server::main_handler,
    ));
    if let (Some(envoy), Some(domains)) = (&config.envoy, domains) {
        serve_envoy(envoy, domains, &config, gateway.clone()).await?;
    }
    rl_gateway::heartbeat::spawn(
        gateway.clone(),
        backend.clone(),
        config.redis.key_prefix.clone(),
        config.redis.heartbeat,
    );
    reload::spawn(reload::RuleSource::new(path, config), backend, gateway);
    let mut terminate = unix::signal(unix::SignalKind::terminate()).map_err(StartError::Signal)?;
    tokio::select! {
        _ = terminate.recv() => log!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => log!("interrupted: stopping"),
    }
    Ok(())
}

/// Binds the Envoy gRPC listener and serves `ShouldRateLimit` on it, its descriptor files
/// reloaded when they change.
async fn serve_envoy(
    envoy: &config::EnvoySettings,
    domains: descriptors::Domains,
    config: &config::Config,
    gateway: Arc<Gateway>,
) -> Result<(), StartError> {
    let listener = bind(envoy.listen).await?;
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
        envoy.response_headers,
    ));
    service.spawn_reloader(envoy.descriptors.clone(), config.server.reload_interval);
    let limits = envoy.limits;
    let incoming = grpc_listener::incoming(listener, limits);
    tokio::spawn(async move {
        let served = grpc_listener::server_builder(limits)
            .add_service(service.server())
            .serve_with_incoming(incoming)
            .await;
        if let Err(error) = served {
            log!("the Envoy gRPC listener stopped: {error}");
        }
    });
    Ok(())
}
