#!/usr/bin/python3
"""rls_client.py - a real, independent gRPC client of rateld's Envoy rate
limit service: python3-grpcio with stubs that python3-grpc-tools generates
from proto/ at run time (nothing generated is committed).

Run with Debian's /usr/bin/python3 (its grpcio and grpc_tools live there,
not in another python3 that may come first on PATH).

  rls_client.py call ADDR DOMAIN DESC [DESC ...] [--hits N] [--times N]
                    [--timeout SECONDS] [--pause]
      DESC is k=v[,k=v...] with an optional ;hits=N (descriptor
      hits_addend); prints one line per call:
      OK|OVER_LIMIT [code limit remaining reset_ms]... | headers
      --timeout is each call's deadline (default 5 s): past it the client
      cancels the call (RST_STREAM), as Envoy does past its own.
      --pause: between calls (on one connection), print "paused" and
      wait for a line on stdin.
  rls_client.py health ADDR [SERVICE]
      prints SERVING / NOT_SERVING or the error status
Errors print "ERROR CODE details" (and exit 0: they are answers).
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto")
FILES = [
    "envoy/type/v3/ratelimit_unit.proto",
    "envoy/config/core/v3/base.proto",
    "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
    "envoy/service/ratelimit/v3/rls.proto",
    "grpc/health/v1/health.proto",
]


def stubs():
    """Generates the Python stubs into a fresh directory and imports them."""
    out = tempfile.mkdtemp(prefix="ratel-rls-")
    import grpc_tools

    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I" + PROTO, "-I" + wkt,
         "--python_out=" + out, "--grpc_python_out=" + out] + FILES,
        check=True)
    sys.path.insert(0, out)
    return out


def parse_descriptor(text, rl_pb2):
    hits = None
    if ";hits=" in text:
        text, hits = text.split(";hits=", 1)
    d = rl_pb2.RateLimitDescriptor()
    for pair in text.split(","):
        k, _, v = pair.partition("=")
        d.entries.add(key=k, value=v)
    if hits is not None:
        d.hits_addend.value = int(hits)
    return d


def show(resp, rls_pb2):
    code = rls_pb2.RateLimitResponse.Code.Name
    unit = rls_pb2.RateLimitResponse.RateLimit.Unit.Name
    parts = [code(resp.overall_code)]
    for s in resp.statuses:
        item = code(s.code)
        if s.HasField("current_limit"):
            item += " %d/%s" % (s.current_limit.requests_per_unit,
                                unit(s.current_limit.unit))
            item += " remaining=%d" % s.limit_remaining
        if s.HasField("duration_until_reset"):
            r = s.duration_until_reset
            item += " reset_ms=%d" % (r.seconds * 1000 + r.nanos // 1000000)
        parts.append("[" + item + "]")
    if resp.response_headers_to_add:
        parts.append("| " + "; ".join(
            "%s: %s" % (h.key, h.value) for h in resp.response_headers_to_add))
    return " ".join(parts)


def main(argv):
    import grpc

    out = stubs()
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    # "grpc" is grpcio's package: the health messages are loaded from their
    # file, and the call made by its method name.
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "health_pb2", os.path.join(out, "grpc/health/v1/health_pb2.py"))
    health_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health_pb2)

    cmd, addr = argv[1], argv[2]
    channel = grpc.insecure_channel(addr)
    try:
        if cmd == "health":
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.
                SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.
                FromString)
            req = health_pb2.HealthCheckRequest(
                service=argv[3] if len(argv) > 3 else "")
            try:
                r = check(req, timeout=5)
                print(health_pb2.HealthCheckResponse.ServingStatus.Name(
                    r.status))
            except grpc.RpcError as e:
                print("ERROR", e.code().name, e.details())
            return 0
        args = argv[3:]
        hits = times = None
        timeout = 5.0
        pause = "--pause" in args
        if pause:
            args.remove("--pause")
        if "--hits" in args:
            i = args.index("--hits")
            hits = int(args[i + 1])
            del args[i:i + 2]
        if "--timeout" in args:
            i = args.index("--timeout")
            timeout = float(args[i + 1])
            del args[i:i + 2]
        if "--times" in args:
            i = args.index("--times")
            times = int(args[i + 1])
            del args[i:i + 2]
        domain, descs = args[0], args[1:]
        req = rls_pb2.RateLimitRequest(domain=domain)
        for text in descs:
            req.descriptors.append(parse_descriptor(text, ratelimit_pb2))
        if hits is not None:
            req.hits_addend = hits
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        for n in range(times or 1):
            if pause and n > 0:
                print("paused", flush=True)
                sys.stdin.readline()
            try:
                print(show(stub.ShouldRateLimit(req, timeout=timeout),
                           rls_pb2), flush=True)
            except grpc.RpcError as e:
                print("ERROR", e.code().name, e.details(), flush=True)
        return 0
    finally:
        channel.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
