"""Tests of mixer_adapter through a real gRPC server on 127.0.0.1, one per template variety.

    python adapters/sdk-python/test_mixer_adapter.py          (tests/tests/oop_examples.rs runs it)
"""
import datetime
import ipaddress
import os
import sys
import threading
import unittest
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402
from google.protobuf import any_pb2, json_format, struct_pb2  # noqa: E402

import mixer_adapter  # noqa: E402
from istio.mixer.adapter.model.v1beta1 import infrastructure_backend_pb2 as backend  # noqa: E402
from istio.mixer.adapter.model.v1beta1 import infrastructure_backend_pb2_grpc as backend_grpc  # noqa: E402
from istio.mixer.adapter.model.v1beta1 import quota_pb2  # noqa: E402
from istio.policy.v1beta1 import type_pb2  # noqa: E402
from mixer.template.apikey import template_handler_service_pb2 as apikey  # noqa: E402
from mixer.template.apikey import template_handler_service_pb2_grpc as apikey_grpc  # noqa: E402
from mixer.template.authorization import template_handler_service_pb2 as authorization  # noqa: E402
from mixer.template.authorization import template_handler_service_pb2_grpc as authorization_grpc  # noqa: E402
from mixer.template.checknothing import template_handler_service_pb2 as checknothing  # noqa: E402
from mixer.template.checknothing import template_handler_service_pb2_grpc as checknothing_grpc  # noqa: E402
from mixer.template.logentry import template_handler_service_pb2 as logentry  # noqa: E402
from mixer.template.logentry import template_handler_service_pb2_grpc as logentry_grpc  # noqa: E402
from mixer.template.quota import template_handler_service_pb2 as quota  # noqa: E402
from mixer.template.quota import template_handler_service_pb2_grpc as quota_grpc  # noqa: E402

SESSION_TYPE_URL = "google.protobuf.Any.type_url"  # what the mixer sends a session id as


def params(value):
    struct = struct_pb2.Struct()
    json_format.ParseDict(value, struct)
    config = any_pb2.Any()
    config.Pack(struct)
    return config


def session(session_id):
    return any_pb2.Any(type_url=SESSION_TYPE_URL, value=session_id.encode())


class Everything(mixer_adapter.Adapter):
    """One adapter serving a template of each variety, recording what it was handed."""

    def __init__(self):
        self.seen, self.closed, self.lock = [], [], threading.Lock()

    def validate(self, params):
        return None if params.get("limit", 0) >= 0 else "params.limit: must not be negative"

    def open(self, params):
        if params.get("refuse"):
            raise ValueError("refused at open")
        if params.get("crash"):
            raise OSError("the backend is down")
        return dict(params, opened=True)

    def close(self, state):
        self.closed.append(state)

    def handle_checknothing(self, instance, state):
        return state.get("allow", False)  # a bool is a verdict too

    def handle_authorization(self, instance, state):
        with self.lock:
            self.seen.append(instance)
        if instance.subject.user == "boom":
            raise RuntimeError("the adapter failed")
        if instance.subject.user == "wrong":
            return "yes"  # not a Verdict
        return mixer_adapter.deny("no %s" % instance.action.method, valid_for=2.5, valid_uses=3)

    def handle_logentry(self, instances, state):
        with self.lock:
            self.seen.extend(instances)

    def handle_quota(self, instance, state, amount, best_effort):
        return state["limit"]

    def handle_apikey(self, instance, state):
        if instance.key == "k-123":
            return {"principal": "team-a", "claims": {"tier": "gold"}}
        if instance.key == "bad-output":
            return {"tier": "gold"}
        return mixer_adapter.unauthenticated("unknown API key", {"www-authenticate": "ApiKey"})


class HelperTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.adapter = Everything()
        handlers, cls.names = mixer_adapter.services(cls.adapter)
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=handlers)
        port = cls.server.add_insecure_port("127.0.0.1:0")
        cls.server.start()
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        cls.backend = backend_grpc.InfrastructureBackendStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop(None)

    def open_session(self, value):
        answer = self.backend.CreateSession(backend.CreateSessionRequest(adapter_config=params(value)))
        self.assertEqual(answer.status.code, 0, answer.status.message)
        return answer.session_id

    def test_services_are_the_templates_defined(self):
        self.assertEqual(self.names, [
            "istio.mixer.adapter.model.v1beta1.InfrastructureBackend",
            "checknothing.HandleCheckNothingService", "authorization.HandleAuthorizationService",
            "logentry.HandleLogEntryService", "quota.HandleQuotaService",
            "apikey.HandleApiKeyService"])
        with self.assertRaisesRegex(TypeError, "no handle_<template> method"):
            mixer_adapter.services(mixer_adapter.Adapter())

    def test_validate_and_create_session_refuse_with_the_adapters_message(self):
        refused = self.backend.Validate(backend.ValidateRequest(adapter_config=params({"limit": -1})))
        self.assertEqual((refused.status.code, refused.status.message), (3, "params.limit: must not be negative"))
        ok = self.backend.Validate(backend.ValidateRequest(adapter_config=params({"limit": 1})))
        self.assertEqual(ok.status.code, 0)
        # A validate that raises on params it did not expect refuses them.
        odd = self.backend.Validate(backend.ValidateRequest(adapter_config=params({"limit": "ten"})))
        self.assertEqual(odd.status.code, 3)
        self.assertTrue(odd.status.message.startswith("TypeError: "), odd.status.message)
        for value, code, message in (({"limit": -1}, 3, "params.limit: must not be negative"),
                                     ({"refuse": True}, 3, "refused at open"),
                                     ({"crash": True}, 13, "OSError: the backend is down")):
            answer = self.backend.CreateSession(backend.CreateSessionRequest(adapter_config=params(value)))
            self.assertEqual((answer.status.code, answer.status.message, answer.session_id), (code, message, ""))

    def test_sessions_are_distinct_closed_once_and_then_unknown(self):
        first, second = self.open_session({"allow": True}), self.open_session({"allow": False})
        self.assertNotEqual(first, second)
        check = checknothing_grpc.HandleCheckNothingServiceStub(self.channel).HandleCheckNothing
        ask = lambda s: check(checknothing.HandleCheckNothingRequest(  # noqa: E731
            instance=checknothing.InstanceMsg(name="i"), adapter_config=session(s)))
        self.assertEqual(ask(first).status.code, 0)
        denied = ask(second).status
        self.assertEqual((denied.code, denied.message), (7, "denied"))
        self.backend.CloseSession(backend.CloseSessionRequest(session_id=first))
        self.backend.CloseSession(backend.CloseSessionRequest(session_id=first))
        self.assertEqual(self.adapter.closed.count({"allow": True, "opened": True}), 1)
        with self.assertRaises(grpc.RpcError) as unknown:
            ask(first)
        self.assertEqual(unknown.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_check_instances_are_python_values_and_verdicts_carry_their_validity(self):
        check = authorization_grpc.HandleAuthorizationServiceStub(self.channel).HandleAuthorization
        subject = authorization.SubjectMsg(user="alice", groups="staff")
        subject.properties["ip"].ip_address_value.value = bytes([10, 0, 0, 7])
        subject.properties["at"].timestamp_value.value.FromSeconds(1_700_000_000)
        subject.properties["took"].duration_value.value.FromMilliseconds(1500)
        subject.properties["headers"].string_map_value.value["x-user"] = "alice"
        subject.properties["mail"].email_address_value.value = "a@example.com"
        subject.properties["n"].int64_value = 7
        subject.properties["unset"].CopyFrom(type_pb2.Value())
        request = authorization.HandleAuthorizationRequest(
            instance=authorization.InstanceMsg(name="authz.instance.default", subject=subject,
                                               action=authorization.ActionMsg(method="GET", path="/x")),
            adapter_config=params({"limit": 1}))
        answer = check(request)
        self.assertEqual((answer.status.code, answer.status.message), (7, "no GET"))
        self.assertEqual(answer.valid_duration.ToMilliseconds(), 2500)
        self.assertEqual(answer.valid_use_count, 3)
        seen = self.adapter.seen[-1]
        self.assertEqual(seen.name, "authz.instance.default")
        self.assertEqual(seen.action.path, "/x")
        self.assertEqual(seen.subject.properties, {
            "ip": ipaddress.ip_address("10.0.0.7"),
            "at": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc),
            "took": datetime.timedelta(seconds=1.5),
            "headers": {"x-user": "alice"},
            "mail": "a@example.com",
            "n": 7,
            "unset": None,
        })

    def test_a_generator_answers_its_outputs_or_a_denial(self):
        generate = apikey_grpc.HandleApiKeyServiceStub(self.channel).HandleApiKey

        def ask(key):
            return generate(apikey.HandleApiKeyRequest(
                instance=apikey.InstanceMsg(name="key.instance.default", key=key),
                adapter_config=params({"limit": 1})))

        known = ask("k-123")
        self.assertEqual((known.principal, dict(known.claims)), ("team-a", {"tier": "gold"}))
        self.assertFalse(known.HasField("status"))
        denied = ask("k-999")
        self.assertEqual((denied.status.code, denied.status.message), (16, "unknown API key"))
        self.assertEqual([(h.name, h.value) for h in denied.response_header_operations],
                         [("www-authenticate", "ApiKey")])
        self.assertEqual(denied.principal, "")
        with self.assertRaises(grpc.RpcError) as failed:
            ask("bad-output")
        self.assertEqual(failed.exception.code(), grpc.StatusCode.INTERNAL)
        self.assertIn("'tier' is not an output of apikey.OutputMsg", failed.exception.details())

    def test_an_adapters_failure_is_internal_with_its_message(self):
        check = authorization_grpc.HandleAuthorizationServiceStub(self.channel).HandleAuthorization
        for user, message in (("boom", "RuntimeError: the adapter failed"), ("wrong", "TypeError: a check handler returns a Verdict")):
            request = authorization.HandleAuthorizationRequest(
                instance=authorization.InstanceMsg(subject=authorization.SubjectMsg(user=user)),
                adapter_config=params({}))
            with self.assertRaises(grpc.RpcError) as failed:
                check(request)
            self.assertEqual(failed.exception.code(), grpc.StatusCode.INTERNAL)
            self.assertTrue(failed.exception.details().startswith(message), failed.exception.details())

    def test_params_in_a_call_are_validated(self):
        check = checknothing_grpc.HandleCheckNothingServiceStub(self.channel).HandleCheckNothing
        with self.assertRaises(grpc.RpcError) as refused:
            check(checknothing.HandleCheckNothingRequest(adapter_config=params({"limit": -1})))
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(refused.exception.details(), "params.limit: must not be negative")

    def test_reports_hand_over_every_instance(self):
        report = logentry_grpc.HandleLogEntryServiceStub(self.channel).HandleLogEntry
        first = logentry.InstanceMsg(name="log", severity="Info")
        first.variables["method"].string_value = "GET"
        first.variables["code"].int64_value = 200
        second = logentry.InstanceMsg(name="log", severity="Error")
        before = len(self.adapter.seen)
        report(logentry.HandleLogEntryRequest(instances=[first, second], adapter_config=params({})))
        got = self.adapter.seen[before:]
        self.assertEqual([(i.severity, i.variables) for i in got],
                         [("Info", {"method": "GET", "code": 200}), ("Error", {})])

    def test_quota_grants_at_most_what_was_asked_for_each_quota(self):
        ask = quota_grpc.HandleQuotaServiceStub(self.channel).HandleQuota
        request = quota.HandleQuotaRequest(
            instance=quota.InstanceMsg(name="requestcount.instance.default"),
            adapter_config=session(self.open_session({"limit": 5})),
            quota_request=quota_pb2.QuotaRequest(quotas={
                "a": quota_pb2.QuotaRequest.QuotaParams(amount=3),
                "b": quota_pb2.QuotaRequest.QuotaParams(amount=10, best_effort=True)}))
        answer = ask(request)
        self.assertEqual({k: v.granted_amount for k, v in answer.quotas.items()}, {"a": 3, "b": 5})


    def test_serve_refuses_a_half_tls_setup_unreadable_files_and_an_address_it_cannot_bind(self):
        for argv, why in ((["127.0.0.1:0", "--tls-cert", "cert.pem"], 2),
                          (["127.0.0.1:0", "--tls-cert", "/nonexistent/c", "--tls-key", "/nonexistent/k"], 2),
                          (["192.0.2.1:1"], "cannot listen on 192.0.2.1:1: ")):
            with self.assertRaises(SystemExit) as stopped, open(os.devnull, "w") as quiet:
                stderr, sys.stderr = sys.stderr, quiet
                try:
                    mixer_adapter.serve(Everything(), argv=argv)
                finally:
                    sys.stderr = stderr
            code = stopped.exception.code
            self.assertTrue(code == why if isinstance(why, int) else str(code).startswith(why), code)

    def test_serve_refuses_a_port_another_adapter_already_listens_on(self):
        # The stale adapter: a grpcio server with grpcio's defaults (SO_REUSEPORT set), as a
        # helper before this one made; a second start on its port must not share it silently.
        stale = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        port = stale.add_insecure_port("127.0.0.1:0")
        stale.start()
        outcome = []

        def second():  # in a thread: a helper that does start serves forever
            try:
                mixer_adapter.serve(Everything(), argv=["127.0.0.1:%d" % port])
            except SystemExit as e:
                outcome.append(str(e.code))

        started = threading.Thread(target=second, daemon=True)
        started.start()
        started.join(timeout=10)
        stale.stop(None)
        self.assertEqual(outcome, ["cannot listen on 127.0.0.1:%d: Address already in use" % port])


if __name__ == "__main__":
    unittest.main()
