"""Envoy's ShouldRateLimit called as a third party calls it: grpcio, with the messages of envoy-data-plane (Envoy's
published protos compiled by others, from PyPI), not the server's own structs.

Reads one JSON object on stdin: {"target": "127.0.0.1:PORT", "secret": S, "root_ca": PEM file or null,
"calls": [{"domain": D, "descriptors": [[[key, value], ...], ...], "hits_addend": N}, ...]}. Writes one JSON line
per call: {"overall_code": NAME, "statuses": [...], "headers": {...}} or {"error": GRPC CODE NAME, "details": ...}.
"""

import json
import sys

import grpc
from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import RateLimitDescriptor, RateLimitDescriptorEntry
from envoy_data_plane.envoy.service.ratelimit.v3 import RateLimitRequest, RateLimitResponse

PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def channel_of(asked):
    if asked.get("root_ca"):
        with open(asked["root_ca"], "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        return grpc.secure_channel(asked["target"], credentials)
    return grpc.insecure_channel(asked["target"])


def request_of(call):
    descriptors = [
        RateLimitDescriptor(entries=[RateLimitDescriptorEntry(key=k, value=v) for k, v in entries])
        for entries in call["descriptors"]
    ]
    return RateLimitRequest(domain=call["domain"], descriptors=descriptors, hits_addend=call.get("hits_addend", 0))


def answer_of(response):
    statuses = []
    for status in response.statuses:
        limit = status.current_limit
        reset = status.duration_until_reset
        statuses.append({
            "code": status.code.name,
            "limit": None if limit is None else {
                "name": limit.name, "requests_per_unit": limit.requests_per_unit, "unit": limit.unit.name},
            "limit_remaining": status.limit_remaining,
            "reset_seconds": None if reset is None else reset.total_seconds(),
        })
    headers = {h.key: h.value for h in response.response_headers_to_add}
    return {"overall_code": response.overall_code.name, "statuses": statuses, "headers": headers}


def main():
    asked = json.load(sys.stdin)
    with channel_of(asked) as channel:
        method = channel.unary_unary(PATH, RateLimitRequest.SerializeToString, RateLimitResponse.FromString)
        metadata = [("authorization", f"Bearer {asked['secret']}")] if asked.get("secret") else []
        for call in asked["calls"]:
            try:
                answer = answer_of(method(request_of(call), metadata=metadata, timeout=30))
            except grpc.RpcError as e:
                answer = {"error": e.code().name, "details": e.details()}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
