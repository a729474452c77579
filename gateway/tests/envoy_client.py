"""A ShouldRateLimit client written with Python grpcio and the Envoy protocol package of
PyPI (xds-protos): run by gateway/tests/envoy_python.rs against a gateway it started.

    envoy_client.py <port> <domain> <call> [<call> ...]

Each call is `key=value[,key=value...][@hits][!]` for one descriptor (`@0` a look, `!`
negative hits, where the package's protocol has the field); several descriptors of one request are joined with `+`. One line per call:
`<overall> <code>:<remaining>[:<requests_per_unit>] ... retry=<Retry-After or ->`, or
`ERROR <grpc status>`.
"""

import sys

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import wrappers_pb2

CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}


def descriptor(text: str) -> ratelimit_pb2.RateLimitDescriptor:
    negative = text.endswith("!")
    text = text.rstrip("!")
    hits = None
    if "@" in text:
        text, hits = text.split("@")
    # is_negative_hits is newer than xds-protos 1.85's Envoy protocol: set only when asked.
    d = ratelimit_pb2.RateLimitDescriptor(is_negative_hits=True) if negative else \
        ratelimit_pb2.RateLimitDescriptor()
    for pair in text.split(","):
        key, value = pair.split("=", 1)
        d.entries.add(key=key, value=value)
    if hits is not None:
        d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=int(hits)))
    return d


def main() -> int:
    port, domain, calls = sys.argv[1], sys.argv[2], sys.argv[3:]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        for call in calls:
            request = rls_pb2.RateLimitRequest(
                domain=domain, descriptors=[descriptor(d) for d in call.split("+")])
            try:
                response = stub.ShouldRateLimit(request, timeout=30)
            except grpc.RpcError as error:
                print(f"ERROR {error.code().name}")
                continue
            parts = [CODES.get(response.overall_code, "?")]
            for status in response.statuses:
                part = f"{CODES.get(status.code, '?')}:{status.limit_remaining}"
                if status.HasField("current_limit"):
                    part += f":{status.current_limit.requests_per_unit}"
                parts.append(part)
            headers = {h.key.lower(): h.value for h in response.response_headers_to_add}
            parts.append(f"retry={headers.get('retry-after', '-')}")
            print(" ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
