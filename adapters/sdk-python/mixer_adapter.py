"""mixer_adapter: out-of-process Mixer adapters in Python, without the protocol's bookkeeping.

Subclass `Adapter`, define one `handle_<template>` method per template you serve, and call
`serve(MyAdapter())`. The helper answers Validate, CreateSession and CloseSession, keeps the
sessions, answers NOT_FOUND for a session id it does not know (the mixer then creates the
session again and retries the call), decodes each instance into plain Python values, serves
gRPC server reflection listing the `Handle<Template>Service` services you implement (how the
mixer learns your templates), and serves TLS when given a certificate. See README.md.

    class Allow(Adapter):
        def validate(self, params):                     # None, or why the params are unusable
            return None if isinstance(params.get("users"), list) else "users: expected a list"
        def handle_listentry(self, instance, params):   # instance.value: the checked string
            return allow() if instance.value in params["users"] else deny("not allowed")
    serve(Allow())
"""
import argparse
import datetime
import importlib
import ipaddress
import os
import socket
import sys
import threading
import traceback
import uuid
from concurrent import futures
from dataclasses import dataclass

# The generated stubs ship beside this file (see README.md: why they are checked in).
_STUBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs")
if _STUBS not in sys.path:
    sys.path.insert(0, _STUBS)

import grpc  # noqa: E402
from google.protobuf import json_format, struct_pb2  # noqa: E402
from google.rpc import status_pb2  # noqa: E402
from grpc_reflection.v1alpha import reflection, reflection_pb2  # noqa: E402
from istio.mixer.adapter.model.v1beta1 import check_pb2, quota_pb2, report_pb2  # noqa: E402
from istio.mixer.adapter.model.v1beta1 import infrastructure_backend_pb2 as backend  # noqa: E402
from istio.mixer.adapter.model.v1beta1 import infrastructure_backend_pb2_grpc as backend_grpc  # noqa: E402

__all__ = ["Adapter", "Denial", "Instance", "Verdict", "allow", "deny", "serve", "services",
           "unauthenticated", "TEMPLATES"]

#: The templates an adapter may serve, by the name its `handle_<name>` method carries, and
#: their variety: a check answers a `Verdict`, a report nothing, a quota the amount granted,
#: an attribute generator a dict of its template's outputs (or a `Denial`).
TEMPLATES = {
    "listentry": "check", "checknothing": "check", "authorization": "check",
    "metric": "report", "logentry": "report", "tracespan": "report", "reportnothing": "report",
    "quota": "quota",
    "kubernetes": "attributes", "jwt": "attributes", "apikey": "attributes",
}

# google.rpc.Code values the mixer reads.
_OK, _INVALID_ARGUMENT, _PERMISSION_DENIED, _INTERNAL = 0, 3, 7, 13
_UNAUTHENTICATED = 16


class Instance(dict):
    """One instance as plain Python values: a dict of the template's fields (and `name`, the
    instance's fully qualified name), also readable as attributes (`instance.value`).

    Attribute values become: str, int, float, bool, bytes, `ipaddress` addresses,
    timezone-aware `datetime` (UTC), `timedelta`, and dicts for string maps."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


@dataclass(frozen=True)
class Verdict:
    """A check's answer. `valid_for` (seconds) and `valid_uses` say how long and for how many
    requests the mixer may reuse it; 0 (the default) means not at all."""

    allowed: bool
    message: str = ""
    valid_for: float = 0.0
    valid_uses: int = 0


def allow(valid_for=0.0, valid_uses=0):
    """Allows the request."""
    return Verdict(True, "", valid_for, valid_uses)


def deny(message, valid_for=0.0, valid_uses=0):
    """Denies the request (PERMISSION_DENIED) with `message`, which the caller sees."""
    return Verdict(False, message, valid_for, valid_uses)


@dataclass(frozen=True)
class Denial:
    """An attribute generator's refusal of a request (a bad credential): the check is denied
    with `code` and `message` (never the credential itself), and the denied response carries
    `headers` (`{"www-authenticate": 'Bearer error="invalid_token"'}`). Only `jwt` and
    `apikey` can deny: Istio's `kubernetes` output has no room for it."""

    message: str
    code: int = _UNAUTHENTICATED
    headers: tuple = ()


def unauthenticated(message, headers=None):
    """A generator's denial (UNAUTHENTICATED, 401 on HTTP front ends) with `message`."""
    return Denial(message, _UNAUTHENTICATED, tuple((headers or {}).items()))


class Adapter:
    """Base of an adapter. Override `validate` to refuse params, `open`/`close` to keep state per
    handler config (a session), and define `handle_<template>(self, instance, params)` methods:

    - check templates (listentry, checknothing, authorization) return a `Verdict` (or a bool);
    - report templates (metric, logentry, tracespan, reportnothing) get `instances`, a list,
      and return nothing;
    - quota gets `(instance, params, amount, best_effort)` and returns the amount granted;
    - attribute generators (kubernetes, jwt, apikey) return a dict of the template's outputs
      (`{"principal": "team-a", "claims": {"tier": "gold"}}`; one left out takes its binding's
      default) or `unauthenticated(message)`.

    `params` is what `open` returned (by default the handler's `params` as a dict). Handlers
    run on a thread pool, several at a time: guard shared state with a lock."""

    def validate(self, params):
        """None when `params` (a dict) are usable, else a message saying why not."""
        return None

    def open(self, params):
        """The state handlers get for these (validated) params; raise ValueError to refuse."""
        return params

    def close(self, state):
        """Called when the mixer closes a session with the state `open` returned."""


def _plain(message):
    """A protobuf message of an instance as plain Python values (see `Instance`)."""
    kind = message.DESCRIPTOR.full_name
    if kind == "istio.policy.v1beta1.Value":
        which = message.WhichOneof("value")
        if which is None:
            return None
        inner = getattr(message, which)
        return _plain(inner) if message.DESCRIPTOR.fields_by_name[which].message_type else inner
    if kind == "istio.policy.v1beta1.IPAddress":
        return ipaddress.ip_address(message.value) if message.value else None
    if kind in ("istio.policy.v1beta1.TimeStamp", "istio.policy.v1beta1.Duration"):
        return _plain(message.value)
    if kind == "istio.policy.v1beta1.StringMap":
        return dict(message.value)
    if kind.startswith("istio.policy.v1beta1."):
        return message.value  # EmailAddress, DNSName, Uri: the text
    if kind == "google.protobuf.Timestamp":
        return message.ToDatetime(tzinfo=datetime.timezone.utc)
    if kind == "google.protobuf.Duration":
        return message.ToTimedelta()
    out = Instance()
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            nested = entry.fields_by_name["value"].message_type is not None
            out[field.name] = {k: _plain(v) if nested else v for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_plain(v) if entry is not None else v for v in value]
        elif entry is not None:
            out[field.name] = _plain(value) if message.HasField(field.name) else None
        else:
            out[field.name] = value
    return out


def _status(code=_OK, message=""):
    return status_pb2.Status(code=code, message=message)


class _Sessions(backend_grpc.InfrastructureBackendServicer):
    """Validate, CreateSession and CloseSession, and the params of each call."""

    def __init__(self, adapter):
        self.adapter, self.lock, self.sessions = adapter, threading.Lock(), {}

    def _refusal(self, config):
        """(params, None), or (None, why the params cannot be used)."""
        params = {}
        if config.value:
            struct = struct_pb2.Struct()
            if not config.Unpack(struct):
                return None, "params: expected a google.protobuf.Struct, got %s" % config.type_url
            params = json_format.MessageToDict(struct)
        try:
            why = self.adapter.validate(params)
        except Exception as e:  # params the check did not expect: refused, never let through
            traceback.print_exc()
            why = "%s: %s" % (type(e).__name__, e)
        return (None, why) if why else (params, None)

    def _open(self, params):
        """(state, None), or (None, Status saying why `open` failed)."""
        try:
            return self.adapter.open(params), None
        except ValueError as e:
            return None, _status(_INVALID_ARGUMENT, str(e))
        except Exception as e:  # the adapter's own failure, not the params'
            traceback.print_exc()
            return None, _status(_INTERNAL, "%s: %s" % (type(e).__name__, e))

    def Validate(self, request, context):
        _, why = self._refusal(request.adapter_config)
        return backend.ValidateResponse(status=_status(_INVALID_ARGUMENT, why) if why else _status())

    def CreateSession(self, request, context):
        params, why = self._refusal(request.adapter_config)
        if why is not None:
            return backend.CreateSessionResponse(status=_status(_INVALID_ARGUMENT, why))
        state, failed = self._open(params)
        if failed is not None:
            return backend.CreateSessionResponse(status=failed)
        # Random, not counted: after a restart an old id must not name another handler's session.
        session_id = uuid.uuid4().hex
        with self.lock:
            self.sessions[session_id] = state
        return backend.CreateSessionResponse(session_id=session_id, status=_status())

    def CloseSession(self, request, context):
        with self.lock:
            known = request.session_id in self.sessions
            state = self.sessions.pop(request.session_id, None)
        if known:
            self.adapter.close(state)
        return backend.CloseSessionResponse(status=_status())

    def state(self, config, context):
        """The state for a call's `adapter_config`: a session id (NOT_FOUND when unknown, so the
        mixer creates the session again) or params sent with the call (opened for it alone)."""
        if config.value and not config.type_url.endswith("google.protobuf.Struct"):
            session_id = config.value.decode("utf-8", "replace")
            with self.lock:
                if session_id in self.sessions:
                    return self.sessions[session_id]
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown session %r" % session_id)
        params, why = self._refusal(config)
        if why is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        state, failed = self._open(params)
        if failed is not None:
            code = grpc.StatusCode.INVALID_ARGUMENT if failed.code == _INVALID_ARGUMENT else grpc.StatusCode.INTERNAL
            context.abort(code, failed.message)
        return state


def _check_result(verdict):
    if isinstance(verdict, bool):
        verdict = Verdict(verdict, "" if verdict else "denied")
    if not isinstance(verdict, Verdict):
        raise TypeError("a check handler returns a Verdict (allow() or deny(...)), not %r" % (verdict,))
    result = check_pb2.CheckResult(valid_use_count=max(0, int(verdict.valid_uses)))
    result.status.CopyFrom(_status(_OK) if verdict.allowed else _status(_PERMISSION_DENIED, verdict.message))
    result.valid_duration.FromNanoseconds(int(max(0.0, verdict.valid_for) * 1e9))
    return result


def _output(output_type, answer):
    """A generator's answer as the template's `OutputMsg`."""
    out = output_type()
    fields = out.DESCRIPTOR.fields_by_name
    if isinstance(answer, Denial):
        if "status" not in fields:
            raise TypeError("%s has no room for a denial" % out.DESCRIPTOR.full_name)
        out.status.CopyFrom(_status(answer.code, answer.message))
        for name, value in answer.headers:
            out.response_header_operations.add(name=name, value=value)
        return out
    if not isinstance(answer, dict):
        raise TypeError("a generator returns a dict of outputs or a Denial, not %r" % (answer,))
    for name, value in answer.items():
        field = fields.get(name)
        if field is None or name in ("status", "valid_duration", "response_header_operations"):
            raise TypeError("%r is not an output of %s" % (name, out.DESCRIPTOR.full_name))
        kind = field.message_type.full_name if field.message_type else None
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            getattr(out, name).update(value)
        elif kind == "istio.policy.v1beta1.IPAddress":
            getattr(out, name).value = ipaddress.ip_address(value).packed
        elif kind == "istio.policy.v1beta1.TimeStamp":
            getattr(out, name).value.FromDatetime(value)
        else:
            setattr(out, name, value)
    return out


def _method(sessions, variety, handle, output_type=None):
    """The gRPC method body of one template: decode, call `handle`, encode its answer."""

    def call(request, context):
        state = sessions.state(request.adapter_config, context)
        try:
            if variety == "attributes":
                return _output(output_type, handle(_plain(request.instance), state))
            if variety == "report":
                handle([_plain(i) for i in request.instances], state)
                return report_pb2.ReportResult()
            if variety == "check":
                return _check_result(handle(_plain(request.instance), state))
            result = quota_pb2.QuotaResult()
            for name, asked in request.quota_request.quotas.items():
                granted = int(handle(_plain(request.instance), state, asked.amount, asked.best_effort))
                result.quotas[name].granted_amount = max(0, min(granted, asked.amount))
            return result
        except Exception as e:  # the adapter's own failure: INTERNAL, and the traceback here
            traceback.print_exc()
            context.abort(grpc.StatusCode.INTERNAL, "%s: %s" % (type(e).__name__, e))

    return call


def services(adapter):
    """The gRPC service handlers for `adapter`, and the full names of the services they serve:
    InfrastructureBackend and one `Handle<Template>Service` per `handle_<template>` method.
    `serve` puts them on a server; a test may put them on its own."""
    sessions = _Sessions(adapter)
    names = [backend.DESCRIPTOR.services_by_name["InfrastructureBackend"].full_name]
    handlers = [grpc.method_handlers_generic_handler(names[0], {
        m: grpc.unary_unary_rpc_method_handler(
            getattr(sessions, m),
            request_deserializer=getattr(backend, m + "Request").FromString,
            response_serializer=getattr(backend, m + "Response").SerializeToString)
        for m in ("Validate", "CreateSession", "CloseSession")})]
    for template, variety in TEMPLATES.items():
        handle = getattr(adapter, "handle_" + template, None)
        if handle is None:
            continue
        module = importlib.import_module("mixer.template.%s.template_handler_service_pb2" % template)
        (service,) = module.DESCRIPTOR.services_by_name.values()
        (method,) = service.methods
        names.append(service.full_name)
        request = getattr(module, method.input_type.name)
        response = {"check": check_pb2.CheckResult, "report": report_pb2.ReportResult,
                    "quota": quota_pb2.QuotaResult,
                    "attributes": getattr(module, "OutputMsg", None)}[variety]
        handlers.append(grpc.method_handlers_generic_handler(service.full_name, {
            method.name: grpc.unary_unary_rpc_method_handler(
                _method(sessions, variety, handle, response),
                request_deserializer=request.FromString,
                response_serializer=response.SerializeToString)}))
    if len(names) == 1:
        raise TypeError("%s defines no handle_<template> method (templates: %s)"
                        % (type(adapter).__name__, ", ".join(TEMPLATES)))
    return handlers, names


#: grpcio-reflection serves v1alpha only; v1 has the same messages under another package, so
#: the same servicer answers both, whichever a client asks (grpcurl and tonic ask v1 first).
_REFLECTION = (reflection.SERVICE_NAME, "grpc.reflection.v1.ServerReflection")


def _reflection(names):
    """gRPC server reflection listing `names` and itself, under both of its names."""
    servicer = reflection.ReflectionServicer(list(names) + list(_REFLECTION))
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString)
    return [grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": method})
            for name in _REFLECTION]


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _bind_error(address):
    """Why the OS refuses to bind `address` ("Address already in use"), which grpcio does not
    say; None when a plain bind does not tell (it binds, or `address` is no HOST:PORT)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():  # a unix: address, say: grpcio's own message stands
        return None
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(where)
    except OSError as e:
        return e.strerror or str(e)
    return None


def serve(adapter, argv=None, default_address="127.0.0.1:9071", workers=8):
    """Serves `adapter` until the process is stopped.

    The address is the first argument, else $ADAPTER_ADDR, else `default_address`. TLS: with
    --tls-cert and --tls-key (or $ADAPTER_TLS_CERT, $ADAPTER_TLS_KEY: PEM files) the port
    speaks TLS only; --tls-client-ca (or $ADAPTER_TLS_CLIENT_CA) also requires a client
    certificate signed by that CA (mutual TLS)."""
    env = os.environ.get
    parser = argparse.ArgumentParser(description=(type(adapter).__doc__ or "").strip() or None)
    parser.add_argument("address", nargs="?", default=env("ADAPTER_ADDR", default_address))
    parser.add_argument("--tls-cert", default=env("ADAPTER_TLS_CERT"))
    parser.add_argument("--tls-key", default=env("ADAPTER_TLS_KEY"))
    parser.add_argument("--tls-client-ca", default=env("ADAPTER_TLS_CLIENT_CA"))
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_client_ca and not args.tls_cert):
        parser.error("TLS needs --tls-cert and --tls-key together (--tls-client-ca needs both too)")
    handlers, names = services(adapter)
    # grpcio sets SO_REUSEPORT by default: a second adapter started on a port a stale one holds
    # would share it silently, and the stale one would keep answering some calls. Refused.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                         handlers=handlers + _reflection(names),
                         options=[("grpc.so_reuseport", 0)])
    if args.tls_cert:
        try:
            ca = _read(args.tls_client_ca) if args.tls_client_ca else None
            key, cert = _read(args.tls_key), _read(args.tls_cert)
        except OSError as e:
            parser.error("cannot read %s: %s" % (e.filename, e.strerror))
        credentials = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=ca is not None)
    try:
        port = (server.add_secure_port(args.address, credentials) if args.tls_cert
                else server.add_insecure_port(args.address))
    except RuntimeError as e:  # grpcio's way of saying the address cannot be bound
        port, why = 0, _bind_error(args.address) or e
    else:
        why = "no port"
    if not port:
        sys.exit("cannot listen on %s: %s" % (args.address, why))
    server.start()
    print("%s listening on %s (%s)%s" % (type(adapter).__name__, args.address,
          ", ".join(names[1:]), " with TLS" if args.tls_cert else ""), flush=True)
    server.wait_for_termination()
