"""The consumer-dispatch agent: batches, acks, failures coming back, last_error, concurrency."""

from __future__ import annotations

import json
import socket
import threading

import boto3
import pytest
from moto import mock_aws

from functions.agents.consumer_invokers import ConsumerFailed, choose_invoker, lambda_invoker, local_consumers
from postbox import aws, config
from postbox.queues import consumers, service
from support import consumer_functions as fn

TENANT = "0f3a3c1e-5d2b-4c8e-9a71-2b6f0d4e8c11"


pytestmark = pytest.mark.usefixtures("local_function")


def _only(queue_name):
    """An invoker that serves only this test's queue (other tests' queues may have consumers)."""
    inner = choose_invoker()

    def invoke(tenant_id, function_name, payload):
        if payload["queue"] != queue_name:
            raise RuntimeError("not this test's queue")
        inner(tenant_id, function_name, payload)

    return invoke


def _consumer_queue(tenant, name, **consumer):
    service.create_queue(tenant.principal, name, {
        "visibility_timeout_sec": 1,
        "consumer": {"function_name": fn.name_for(tenant.tenant_id), **consumer},
    })


def test_successful_batches_are_archived(tenant):
    _consumer_queue(tenant, "jobs", batch_size=5, ack="archive")
    service.send_messages(tenant.principal, "jobs", list(range(12)))
    assert consumers.dispatch(_only("jobs"), budget_s=10) >= 12
    seen = [m["message"] for call in fn.calls if call["queue"] == "jobs" for m in call["messages"]]
    assert sorted(seen) == list(range(12))
    assert all(len(c["messages"]) <= 5 for c in fn.calls)
    q = service.get_queue(tenant.principal, "jobs")
    assert q["queue_length"] == 0 and q["metrics"]["archived"] == 12 and q["consumer"]["last_error"] == ""


def test_ack_delete_deletes(tenant):
    _consumer_queue(tenant, "jobs", ack="delete")
    service.send_messages(tenant.principal, "jobs", [1, 2])
    consumers.dispatch(_only("jobs"), budget_s=10)
    q = service.get_queue(tenant.principal, "jobs")
    assert q["queue_length"] == 0 and q["metrics"]["archived"] == 0


def test_a_failing_function_sees_its_batch_again(tenant):
    _consumer_queue(tenant, "jobs", batch_size=10, visibility_timeout_sec=10)
    service.send_messages(tenant.principal, "jobs", ["a", "b"])
    fn.fail_next = 1
    consumers.dispatch(_only("jobs"), budget_s=5)
    q = service.get_queue(tenant.principal, "jobs")
    assert q["queue_length"] == 2 and "consumer exploded" in q["consumer"]["last_error"]
    assert q["metrics"]["in_flight"] == 2
    first_batch = [m["msg_id"] for m in fn.calls[0]["messages"]]
    for msg_id in first_batch:  # the timeout running out, without waiting 10 s
        service.set_visibility(tenant.principal, "jobs", msg_id, 0)
    consumers.dispatch(_only("jobs"), budget_s=5)
    again = fn.calls[1]["messages"]
    assert [m["msg_id"] for m in again] == first_batch and all(m["read_ct"] == 2 for m in again)
    q = service.get_queue(tenant.principal, "jobs")
    assert q["queue_length"] == 0 and q["consumer"]["last_error"] == ""


def test_disabled_consumers_are_skipped(tenant):
    _consumer_queue(tenant, "jobs", enabled=False)
    service.send_messages(tenant.principal, "jobs", [1])
    consumers.dispatch(_only("jobs"), budget_s=2)
    assert not [c for c in fn.calls if c["queue"] == "jobs"]


def test_concurrency_is_honoured_across_overlapping_runs(tenant):
    _consumer_queue(tenant, "jobs", batch_size=1, concurrency=2)
    service.send_messages(tenant.principal, "jobs", list(range(30)))
    runs = [threading.Thread(target=consumers.dispatch, args=(_only("jobs"), 20)) for _ in range(3)]
    for r in runs:
        r.start()
    for r in runs:
        r.join()
    delivered = sorted(m["message"] for c in fn.calls for m in c["messages"])
    assert delivered == list(range(30))
    assert fn.peak <= 2


def test_one_tenants_slow_functions_hold_no_other_tenants_delivery(make_tenant):
    """Slots are handed out by tenant, fewest running first: a tenant whose queues' functions never
    answer (two queues, listed first, as many as the workers) leaves a worker for another tenant's."""
    slow, other = make_tenant(), make_tenant()
    for name in ("slow-a", "slow-b"):
        _consumer_queue(slow, name, concurrency=1)
        service.send_messages(slow.principal, name, [1])
    _consumer_queue(other, "prompt", concurrency=1)
    service.send_messages(other.principal, "prompt", ["x", "y"])
    served = threading.Event()
    delivered = []

    def invoke(tenant_id, function_name, payload):
        if payload["queue"] in ("slow-a", "slow-b") and tenant_id == slow.tenant_id:
            served.wait(15)  # answers only once the other tenant was served: never, within the run
            raise TimeoutError("no answer")
        if payload["queue"] != "prompt" or tenant_id != other.tenant_id:
            raise RuntimeError("not this test's queue")
        delivered.extend(m["message"] for m in payload["messages"])
        served.set()

    consumers.dispatch(invoke, budget_s=10, workers=2)
    assert sorted(delivered) == ["x", "y"]


class _DroppingLambda:
    """A Lambda endpoint that takes each Invoke and hangs up without an answer (as a function that
    ran on while the connection broke): a retry would invoke the function again."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                if conn.recv(65536):
                    self.requests += 1


def test_a_consumer_is_invoked_once_per_batch_even_when_the_call_breaks(monkeypatch):
    endpoint = _DroppingLambda()
    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x"), ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("AWS_ENDPOINT_URL_LAMBDA", endpoint.url)):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("POSTBOX_CONSUMER_INVOKER_ROLE_ARN", raising=False)
    config.reset()
    aws.reset()
    try:
        with pytest.raises(Exception):  # noqa: B017 - botocore's connection error: the batch's failure
            lambda_invoker(timeout_s=5)(TENANT, "postbox-consumer-x", {"queue": "q", "messages": []})
    finally:
        endpoint.sock.close()
    assert endpoint.requests == 1


def test_lambda_invoker_calls_lambda_and_reports_function_errors():
    class FakeStream:
        def __init__(self, data):
            self.data = data

        def read(self):
            return self.data

    with mock_aws(config={"lambda": {"use_docker": False}}):
        client = boto3.client("lambda", region_name="us-east-1")
        iam = boto3.client("iam", region_name="us-east-1")
        role = iam.create_role(RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        client.create_function(FunctionName="postbox-consumer-x", Runtime="python3.12", Role=role,
                               Handler="h.h", Code={"ZipFile": b"x"})
        calls = []

        class Recording:
            def invoke(self, **kwargs):
                calls.append(kwargs)
                answer = client.invoke(**kwargs)
                calls.append(answer)
                return answer

        lambda_invoker(Recording())(TENANT, "postbox-consumer-x", {"queue": "q", "messages": [{"msg_id": 1}]})
        request, answer = calls
        assert request["FunctionName"] == "postbox-consumer-x"
        assert request["InvocationType"] == "RequestResponse"  # synchronous: a failure is seen
        assert json.loads(request["Payload"]) == {"queue": "q", "messages": [{"msg_id": 1}]}
        assert answer["StatusCode"] == 200 and "FunctionError" not in answer

    class ErrorClient:
        def invoke(self, **kwargs):
            return {"FunctionError": "Unhandled", "Payload": FakeStream(b'{"errorMessage": "boom"}')}

    with pytest.raises(ConsumerFailed, match="boom"):
        lambda_invoker(ErrorClient())(TENANT, "f", {})


def test_local_consumer_spec_parsing():
    assert local_consumers("a=x.y, b = m.n ,junk") == {"a": "x.y", "b": "m.n"}
    assert local_consumers("") == {}


def test_an_unknown_local_consumer_points_at_postbox_consumers(monkeypatch, tmp_path):
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_LAMBDA_FUNCTION_NAME", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("POSTBOX_CONSUMERS", "")
    with pytest.raises(ConsumerFailed, match="POSTBOX_CONSUMERS=\"send-email=package.module.function\""):
        choose_invoker()(TENANT, "send-email", {"queue": "q", "messages": []})
