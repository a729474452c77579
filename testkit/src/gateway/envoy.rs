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
