//! rl-gateway: the rate limiter in front of an API. Each request is matched to a rule,
//! charged to its client's budget with one RL.HIT, and forwarded or answered 429; when
//! Redis cannot answer in time the request goes through (fail-open) unless its rule says
//! otherwise. See the README's gateway section and gateway/rules.example.toml.

use rl_gateway::decider::redis::Backend;
use rl_gateway::logging::log;
use rl_gateway::net::server;
use rl_gateway::{config, decider, reload, service};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
        ["--check-config", path] => match config::load(path.as_ref()).and_then(|config| {
            let domains = match &config.envoy {
                Some(envoy) => Some(rl_gateway::front::envoy::descriptors::load(
                    &envoy.descriptors,
                )?),
                None => None,
            };
            Ok((config, domains))
        }) {
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
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
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

async fn serve(path: PathBuf, config: config::Config) -> Result<(), String> {
    // The descriptors first: a file that does not load stops the start, as a bad TOML does.
    let domains = match &config.envoy {
        Some(envoy) => Some(rl_gateway::front::envoy::descriptors::load(
            &envoy.descriptors,
        )?),
        None => None,
    };
    let backend = Backend::connect(&config.redis.target).map_err(|e| e.to_string())?;
    if !backend.wait_ready(STARTUP_WAIT).await {
        log!("Redis does not answer yet; decisions fail open until it does");
    }
    let decider = decider::Decider::new(backend.clone(), &config.redis, config.deny_cache_capacity);
    let gateway = Arc::new(service::Gateway::new(
        config.server.clone(),
        config.redis.key_prefix.clone(),
        config.rules.clone(),
        decider,
    ));
    let bind = |address| async move {
        tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| format!("cannot listen on {address}: {e}"))
    };
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
        let listener = bind(envoy.listen).await?;
        log!(
            "Envoy rate limit service (gRPC) on {}: {} domains from {}",
            envoy.listen,
            domains.len(),
            envoy.descriptors.display()
        );
        let service = Arc::new(rl_gateway::front::envoy::EnvoyService::new(
            gateway.clone(),
            domains,
            config.redis.key_prefix.clone(),
            envoy.response_headers,
        ));
        service.spawn_reloader(envoy.descriptors.clone(), config.server.reload_interval);
        let limits = envoy.limits;
        let incoming = rl_gateway::front::envoy::grpc_listener::incoming(listener, limits);
        tokio::spawn(async move {
            let served = rl_gateway::front::envoy::grpc_listener::server_builder(limits)
                .add_service(service.server())
                .serve_with_incoming(incoming)
                .await;
            if let Err(error) = served {
                log!("the Envoy gRPC listener stopped: {error}");
            }
        });
    }
    rl_gateway::heartbeat::spawn(
        gateway.clone(),
        backend.clone(),
        config.redis.key_prefix.clone(),
        config.redis.heartbeat,
    );
    reload::spawn(reload::RuleSource::new(path, config), backend, gateway);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
    tokio::select! {
        _ = terminate.recv() => log!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => log!("interrupted: stopping"),
    }
    Ok(())
}
