"""metrics-to-file: an out-of-process Mixer adapter for the `metric` template, in Python.

Each metric instance the mixer reports becomes one JSON line appended to the file named by the
handler's `params.path`: {"name": ..., "value": ..., "dimensions": {...}}.

    sh make_stubs.sh && PYTHONPATH=stubs python adapter.py [ADDR]   (default 127.0.0.1:9071)
"""
import ipaddress
import json
import os
import sys
import threading
from concurrent import futures

import grpc
from google.protobuf import json_format, struct_pb2
from google.rpc import status_pb2
from istio.mixer.adapter.model.v1beta1 import infrastructure_backend_pb2 as backend
from istio.mixer.adapter.model.v1beta1 import infrastructure_backend_pb2_grpc as backend_grpc
from istio.mixer.adapter.model.v1beta1 import report_pb2
from mixer.template.metric import template_handler_service_pb2_grpc as metric_grpc

sessions, lock = {}, threading.Lock()  # session id -> params, filled by CreateSession


def params_of(config, context):
    """A handler's params: a google.protobuf.Struct, or the id of a session holding them."""
    if config.type_url.endswith("google.protobuf.Struct"):
        params = struct_pb2.Struct()
        config.Unpack(params)
        return json_format.MessageToDict(params)
    with lock:
        params = sessions.get(config.value.decode()) if config.value else {}
    return params if params is not None else context.abort(grpc.StatusCode.NOT_FOUND, "unknown session")


def problem(params):
    """A google.rpc.Status: OK when the params are usable, INVALID_ARGUMENT saying why not."""
    ok = isinstance(params.get("path"), str)
    return status_pb2.Status(code=0 if ok else 3, message="" if ok else "params.path: expected a file path")


def plain(value):
    """An istio.policy.v1beta1.Value as a JSON-friendly Python value."""
    kind = value.WhichOneof("value")
    v = getattr(value, kind) if kind else None
    if kind == "ip_address_value":
        return str(ipaddress.ip_address(v.value))
    if kind in ("timestamp_value", "duration_value"):
        return v.value.ToJsonString()
    if kind == "string_map_value":
        return dict(v.value)
    return v.value if kind in ("dns_name_value", "email_address_value", "uri_value") else v


class Backend(backend_grpc.InfrastructureBackendServicer):
    def Validate(self, request, context):
        return backend.ValidateResponse(status=problem(params_of(request.adapter_config, context)))

    def CreateSession(self, request, context):
        params = params_of(request.adapter_config, context)
        if problem(params).code:
            return backend.CreateSessionResponse(status=problem(params))
        with lock:
            session_id = "py-session-%d" % (len(sessions) + 1)
            sessions[session_id] = params
        return backend.CreateSessionResponse(session_id=session_id, status=status_pb2.Status())

    def CloseSession(self, request, context):
        with lock:
            sessions.pop(request.session_id, None)
        return backend.CloseSessionResponse(status=status_pb2.Status())


class Metrics(metric_grpc.HandleMetricServiceServicer):
    def HandleMetric(self, request, context):
        params = params_of(request.adapter_config, context)
        lines = "".join(json.dumps({"name": i.name, "value": plain(i.value), "dimensions": {
            k: plain(v) for k, v in sorted(i.dimensions.items())}}) + "\n" for i in request.instances)
        with lock, open(params["path"], "a", encoding="utf-8") as out:
            out.write(lines)
        return report_pb2.ReportResult()


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ADAPTER_ADDR", "127.0.0.1:9071")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    backend_grpc.add_InfrastructureBackendServicer_to_server(Backend(), server)
    metric_grpc.add_HandleMetricServiceServicer_to_server(Metrics(), server)
    server.add_insecure_port(addr)
    server.start()
    print("metrics-to-file adapter listening on", addr, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
