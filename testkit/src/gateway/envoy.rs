//! A gateway serving Envoy's rate limit service over gRPC, and a tonic client for it (the
//! generated client of envoy-types, which nobody here wrote).

use super::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
pub use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
pub use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;

/// A gateway with `[envoy]` on a free port, its descriptors the YAML `files` (name,
/// text) written into a directory of their own; `redis` is the `[redis]` section.
pub struct EnvoyGateway {
    pub gateway: Gateway,
    pub grpc_port: u16,
    _yaml: TempDir,
    runtime: tokio::runtime::Runtime,
    client: RateLimitServiceClient<tonic::transport::Channel>,
}

impl EnvoyGateway {
    pub fn start(redis: &str, files: &[(&str, &str)]) -> EnvoyGateway {
        EnvoyGateway::start_with(redis, "", files)
    }

    /// [`EnvoyGateway::start`] with more lines of `[envoy]`.
    pub fn start_with(redis: &str, envoy_lines: &str, files: &[(&str, &str)]) -> EnvoyGateway {
        let yaml = tempfile::Builder::new()
            .prefix("rl-envoy-yaml-")
            .tempdir()
            .expect("temp dir");
        for (name, text) in files {
            fs::write(yaml.path().join(name), text).expect("write the YAML");
        }
        let grpc_port = free_port();
        let gateway = Gateway::start(
            "mode = \"check\"\n",
            &format!(
                "{redis}\n[envoy]\nlisten = \"127.0.0.1:{grpc_port}\"\ndescriptors = \"{}\"\n{envoy_lines}\n",
                yaml.path().display()
            ),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let deadline = Instant::now() + START_LIMIT;
        let client = loop {
            let url = format!("http://127.0.0.1:{grpc_port}");
            match runtime.block_on(RateLimitServiceClient::connect(url)) {
                Ok(client) => break client,
                Err(error) if Instant::now() > deadline => {
                    panic!("no gRPC listener: {error}\n{}", gateway.log())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        EnvoyGateway {
            gateway,
            grpc_port,
            _yaml: yaml,
            runtime,
            client,
        }
    }

    /// Writes (or replaces, atomically) the descriptor file `name`.
    pub fn write_descriptors(&self, name: &str, text: &str) {
        let tmp = self._yaml.path().join(format!(".{name}.new"));
        fs::write(&tmp, text).expect("write the YAML");
        fs::rename(&tmp, self._yaml.path().join(name)).expect("rename the YAML");
    }

    /// On one Redis server: `[redis]` pointing at it, deadline 1 s.
    pub fn on(redis: &Server, files: &[(&str, &str)]) -> EnvoyGateway {
        EnvoyGateway::start(&redis_section(redis.port(), ""), files)
    }

    /// A new client on a connection of its own.
    pub fn reconnect(&mut self) -> Result<(), tonic::transport::Error> {
        let url = format!("http://127.0.0.1:{}", self.grpc_port);
        self.client = self
            .runtime
            .block_on(RateLimitServiceClient::connect(url))?;
        Ok(())
    }

    /// Sends `request` with a metadata entry `name: value`.
    pub fn call_with_metadata(
        &mut self,
        request: RateLimitRequest,
        name: &'static str,
        value: &str,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let mut request = tonic::Request::new(request);
        request
            .metadata_mut()
            .insert(name, value.parse().expect("an ASCII value"));
        let client = &mut self.client;
        self.runtime
            .block_on(client.should_rate_limit(request))
            .map(tonic::Response::into_inner)
    }

    /// Sends `request`; the answer or the gRPC status.
    pub fn call(&mut self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        let client = &mut self.client;
        self.runtime
            .block_on(client.should_rate_limit(request))
            .map(tonic::Response::into_inner)
    }

    /// Sends `request`, which must be answered.
    pub fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        let shown = format!("{request:?}");
        self.call(request)
            .unwrap_or_else(|status| panic!("{shown}: {status:?}\n{}", self.gateway.log()))
    }
}

/// One descriptor of `(key, value)` entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// [`desc`] with its own `hits_addend`, negative when `negative`.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64, negative: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        is_negative_hits: negative,
        ..desc(entries)
    }
}

/// [`desc`] with its own limit (Envoy's override): `requests_per_unit` per `unit`
/// (Envoy's enum number: 1 second, 2 minute, 3 hour, 4 day).
pub fn desc_limit(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..desc(entries)
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

pub fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

pub fn code(response: &RateLimitResponse, i: usize) -> Code {
    Code::try_from(response.statuses[i].code).unwrap_or(Code::Unknown)
}

pub fn remaining(response: &RateLimitResponse, i: usize) -> u32 {
    response.statuses[i].limit_remaining
}

/// The value of the response header `name` Envoy is asked to add, if any.
pub fn header<'r>(response: &'r RateLimitResponse, name: &str) -> Option<&'r str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

impl EnvoyGateway {
    /// On one Redis server with more lines of `[envoy]` (`[redis]` as [`EnvoyGateway::on`]).
    pub fn on_with(redis: &Server, envoy_lines: &str, files: &[(&str, &str)]) -> EnvoyGateway {
        EnvoyGateway::start_with(&redis_section(redis.port(), ""), envoy_lines, files)
    }

    /// Removes the descriptor file `name` (the reload then drops its domain).
    pub fn remove_descriptors(&self, name: &str) {
        fs::remove_file(self._yaml.path().join(name)).expect("remove the YAML");
    }

    /// Waits, when `probe`'s first descriptor's window ends within `margin`, until that
    /// window is over, so that a sequence asked next starts in a fresh window. `probe`
    /// should be a look (`hits_addend` 0) so that it counts nothing. Not an assertion: a
    /// sequence that still spans two windows is caught by [`one_window`].
    pub fn fresh_window(&mut self, probe: RateLimitRequest, margin: Duration) {
        let answer = self.ask(probe);
        if let Some(left) = reset_ms(&answer, 0).map(Duration::from_millis) {
            if left <= margin {
                std::thread::sleep(left + Duration::from_millis(20));
            }
        }
    }
}

/// The limit descriptor `i` shows, `(requests_per_unit, unit)` (Envoy's unit number: 1
/// second, 2 minute, 3 hour, 4 day, 5 month, 6 year), `None` without one.
pub fn shown_limit(response: &RateLimitResponse, i: usize) -> Option<(u32, i32)> {
    response.statuses[i]
        .current_limit
        .as_ref()
        .map(|limit| (limit.requests_per_unit, limit.unit))
}

/// Descriptor `i`'s `duration_until_reset` in milliseconds, `None` without one.
pub fn reset_ms(response: &RateLimitResponse, i: usize) -> Option<u64> {
    let reset = response.statuses[i].duration_until_reset.as_ref()?;
    let seconds = u64::try_from(reset.seconds).ok()?;
    let nanos = u64::try_from(reset.nanos).ok()?;
    Some(seconds * 1000 + nanos / 1_000_000)
}

/// Whether `answers` (in the order they were asked) fell in one fixed window of
/// descriptor `i`: its time to reset never grew from one answer to the next.
pub fn one_window(answers: &[RateLimitResponse], i: usize) -> bool {
    let resets: Vec<u64> = answers.iter().filter_map(|a| reset_ms(a, i)).collect();
    resets.windows(2).all(|pair| pair[1] <= pair[0])
}

/// Runs `rl-gateway --check-config` on a TOML whose `[envoy] descriptors` is a directory
/// holding exactly `files` (name, text), with more `[envoy]` lines `envoy_lines`.
pub fn check_descriptors(files: &[(&str, &str)], envoy_lines: &str) -> Output {
    let dir = tempfile::Builder::new()
        .prefix("rl-envoy-check-")
        .tempdir()
        .expect("temp dir");
    let yaml = dir.path().join("descriptors");
    fs::create_dir(&yaml).expect("the descriptors' directory");
    for (name, text) in files {
        fs::write(yaml.join(name), text).expect("write the YAML");
    }
    let toml = dir.path().join("gateway.toml");
    fs::write(
        &toml,
        format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nmode = \"check\"\n[envoy]\nlisten = \"127.0.0.1:2\"\ndescriptors = \"descriptors\"\n{envoy_lines}\n"
        ),
    )
    .expect("write the TOML");
    check_config(&toml)
}

/// Runs `sequence(attempt)` (which asks its requests and returns the answers, in order)
/// until its answers fell in one window of every descriptor of the first answer, at most
/// five times: a sequence that crossed a window's end is asked again, with fresh values
/// chosen by `attempt`, instead of asserting how long calls take.
pub fn in_one_window(
    mut sequence: impl FnMut(usize) -> Vec<RateLimitResponse>,
) -> Vec<RateLimitResponse> {
    for attempt in 0..5 {
        let answers = sequence(attempt);
        let count = answers.first().map_or(0, |a| a.statuses.len());
        if (0..count).all(|i| one_window(&answers, i)) {
            return answers;
        }
        println!("attempt {attempt} crossed a window's end: asked again");
    }
    panic!("five attempts each crossed a window's end");
}

/// Asserts descriptor `i`'s status: its code, the limit it shows (`(requests_per_unit,
/// unit)`, `None` for none) and what it says is left; `what` names the call.
pub fn assert_status(
    response: &RateLimitResponse,
    i: usize,
    expected: (Code, Option<(u32, i32)>, u32),
    what: &str,
) {
    let got = (
        code(response, i),
        shown_limit(response, i),
        remaining(response, i),
    );
    assert_eq!(got, expected, "{what}, descriptor {i}: {response:?}");
}

/// Envoy's `RateLimitResponse.RateLimit.Unit` numbers, as `current_limit` shows them.
pub const UNIT_SECOND: i32 = 1;
pub const UNIT_MINUTE: i32 = 2;
pub const UNIT_HOUR: i32 = 3;
pub const UNIT_DAY: i32 = 4;
