"""Parses an Envoy bootstrap YAML into envoy.config.bootstrap.v3.Bootstrap, strictly.

Usage: check_bootstrap.py [--grpc-methods] FILE. Exit 0 when every field (typed_config
payloads included) is one Envoy's protos define and every value has the right type; else exit
1 naming the field. With --grpc-methods, also prints one line per filter or access logger that
calls a gRPC service: `calls METHOD CLUSTER`, METHOD the full path it calls (looked up in the
protos' own service definitions, so a wrong name fails here), CLUSTER its grpc_service's
envoy_grpc cluster. Envoy's own `--mode validate` would also run its validation rules; its binary is not
available on the build machines, its protos are (PyPI xds-protos).
"""
import sys

import yaml
from google.protobuf import json_format

# Importing a module registers its messages, so `@type` in typed_config resolves.
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2  # noqa: F401
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2  # noqa: F401
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.access_loggers.grpc.v3 import als_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2  # noqa: F401
from envoy.extensions.access_loggers.open_telemetry.v3 import logs_service_pb2  # noqa: F401
# The services the filters call, for --grpc-methods.
from envoy.service.auth.v3 import external_auth_pb2  # noqa: F401
from envoy.service.accesslog.v3 import als_pb2 as als_service_pb2  # noqa: F401
from envoy.service.ratelimit.v3 import rls_pb2  # noqa: F401
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as otlp_logs_pb2  # noqa: F401
from google.protobuf import any_pb2, descriptor_pool, message_factory

# Which gRPC method each typed_config calls: Envoy's code fixes it (the protos say which
# service a filter speaks only in comments), so it is named here, and checked to exist.
CALLS = {
    # typed_config: (service, method, where its GrpcService is)
    "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz": (
        "envoy.service.auth.v3.Authorization", "Check", "grpc_service"),
    "envoy.extensions.filters.http.ratelimit.v3.RateLimit": (
        "envoy.service.ratelimit.v3.RateLimitService", "ShouldRateLimit", "rate_limit_service.grpc_service"),
    "envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig": (
        "envoy.service.accesslog.v3.AccessLogService", "StreamAccessLogs", "common_config.grpc_service"),
    "envoy.extensions.access_loggers.grpc.v3.TcpGrpcAccessLogConfig": (
        "envoy.service.accesslog.v3.AccessLogService", "StreamAccessLogs", "common_config.grpc_service"),
    "envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig": (
        "opentelemetry.proto.collector.logs.v1.LogsService", "Export", "common_config.grpc_service"),
}


def grpc_calls(message):
    """(method path, cluster) of every typed_config below `message` that calls a gRPC service."""
    found = []
    if isinstance(message, any_pb2.Any):
        name = message.TypeName()
        inner = descriptor_pool.Default().FindMessageTypeByName(name)
        unpacked = message_factory.GetMessageClass(inner)()
        message.Unpack(unpacked)
        if name in CALLS:
            service, method, at = CALLS[name]
            # Fails (KeyError) unless the protos define the service and the method.
            descriptor_pool.Default().FindServiceByName(service).methods_by_name[method]
            grpc = unpacked
            for part in at.split("."):
                grpc = getattr(grpc, part)
            found.append((f"/{service}/{method}", grpc.envoy_grpc.cluster_name))
        return found + grpc_calls(unpacked)
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            values = value.values()
        elif field.is_repeated:
            values = value
        else:
            values = [value]
        for v in values:
            if hasattr(v, "ListFields"):
                found += grpc_calls(v)
    return found


def main(path, grpc_methods=False):
    with open(path) as f:
        doc = yaml.safe_load(f)
    try:
        bootstrap = json_format.ParseDict(
            doc, bootstrap_pb2.Bootstrap(), ignore_unknown_fields=False
        )
    except json_format.ParseError as e:
        print(f"{path}: not an Envoy v3 bootstrap: {e}")
        return 1
    listeners = len(bootstrap.static_resources.listeners)
    clusters = len(bootstrap.static_resources.clusters)
    print(f"{path}: a valid Bootstrap with {listeners} listeners and {clusters} clusters")
    if grpc_methods:
        for method, cluster in grpc_calls(bootstrap):
            print(f"calls {method} {cluster}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    flag = "--grpc-methods" in args
    args = [a for a in args if a != "--grpc-methods"]
    if len(args) != 1:
        sys.exit(__doc__)
    sys.exit(main(args[0], flag))
