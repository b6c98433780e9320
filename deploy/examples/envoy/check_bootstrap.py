"""Parses an Envoy bootstrap YAML into envoy.config.bootstrap.v3.Bootstrap, strictly.

Usage: check_bootstrap.py FILE. Exit 0 when every field (typed_config payloads included)
is one Envoy's protos define and every value has the right type; else exit 1 naming the
field. Envoy's own `--mode validate` would also run its validation rules; its binary is not
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


def main(path):
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
