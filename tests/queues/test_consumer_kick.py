"""Prompt delivery: a send that finds its queue's consumer idle starts a dispatch of that queue
(at most one at a time), so delivery does not wait for the schedule; slots are lease rows, never
advisory locks (which would pin an RDS Proxy session)."""

from __future__ import annotations

import json
import statistics
import threading
import time

import boto3
import pytest
from moto import mock_aws

from functions.local.runtime import start_dispatches_in_process
from postbox import config, db
from postbox.queues import consumers, service
from support import consumer_functions as fn


@pytest.fixture(autouse=True)
def no_starter_left(local_function):
    yield
    consumers.set_starter(None)


@pytest.fixture
def started(monkeypatch) -> list[int]:
    """Records each dispatch a send starts, without running it."""
    calls: list[int] = []
    consumers.set_starter(calls.append)
    return calls


def _consumer_queue(tenant, name, **consumer):
    service.create_queue(tenant.principal, name, {
        "visibility_timeout_sec": 5, "consumer": {"function_name": fn.name_for(tenant.tenant_id), **consumer}})
    return _queue_id(tenant, name)


def _queue_id(tenant, name) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT id FROM queues WHERE tenant_id = %s AND name = %s",
                            (tenant.tenant_id, name)).fetchone()[0]


def _wait_for(predicate, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def test_a_send_to_an_idle_consumer_starts_its_dispatch_and_measures_the_latency(tenant, capsys):
    """No scheduler runs here: the dispatch that delivers is the one the send started (an in-process
    invoke of the consumer-dispatch agent with the queue's id, as the asynchronous Lambda invoke on AWS)."""
    qid = _consumer_queue(tenant, "kick-jobs", batch_size=10)
    events: list[dict] = []
    start_dispatches_in_process()
    local_start = consumers._starter
    consumers.set_starter(lambda queue_id: (events.append({"queue_id": queue_id}), local_start(queue_id)))
    latencies = []
    for n in range(5):
        before = len(fn.calls)
        sent_at = time.monotonic()
        service.send_messages(tenant.principal, "kick-jobs", [n])
        assert _wait_for(lambda before=before: len(fn.calls) > before), "the send did not start a dispatch"
        latencies.append((fn.call_times[before] - sent_at) * 1000)
        assert [m["message"] for m in fn.calls[before]["messages"]] == [n]
        # the kicked run gives the kick back once the queue is drained: the next send starts another
        assert _wait_for(lambda: _kick_free(qid))
    assert events == [{"queue_id": qid}] * 5
    with capsys.disabled():
        print(f"\nsend-to-invoke latency, local in-process dispatch: median {statistics.median(latencies):.1f} ms,"
              f" max {max(latencies):.1f} ms over {len(latencies)} sends")


def _kick_free(qid: int) -> bool:
    with db.connection() as conn:
        row = conn.execute("SELECT until <= clock_timestamp() FROM consumer_kicks WHERE queue_id = %s",
                           (qid,)).fetchone()
    return row is None or row[0]


def test_at_most_one_dispatch_per_queue_at_a_time(tenant, started):
    qid = _consumer_queue(tenant, "kick-jobs")
    threads = [threading.Thread(target=service.send_messages, args=(tenant.principal, "kick-jobs", [i]))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert started == [qid]  # eight concurrent sends, one dispatch started
    service.send_messages(tenant.principal, "kick-jobs", ["more"])
    assert started == [qid]  # still running (its kick held): nothing new to start
    delivered = consumers.dispatch_queue(qid, _only("kick-jobs"), budget_s=10)
    assert delivered == 9 and _kick_free(qid)
    service.send_messages(tenant.principal, "kick-jobs", ["after"])
    assert started == [qid, qid]  # drained and released: the next send starts the next dispatch


def _only(queue_name):
    from functions.agents.consumer_invokers import choose_invoker

    inner = choose_invoker()

    def invoke(tenant_id, function_name, payload):
        if payload["queue"] != queue_name:
            raise RuntimeError("not this test's queue")
        inner(tenant_id, function_name, payload)

    return invoke


def test_queues_without_a_consumer_and_delayed_sends_start_nothing(tenant, started):
    service.create_queue(tenant.principal, "plain", {})
    service.send_messages(tenant.principal, "plain", [1, 2])
    _consumer_queue(tenant, "later")
    service.send_messages(tenant.principal, "later", [1], delay=30)
    _consumer_queue(tenant, "off", enabled=False)
    service.send_messages(tenant.principal, "off", [1])
    assert started == []


def test_a_send_that_races_the_release_is_served(tenant, started, monkeypatch):
    """The dispatch gives its kick back, then looks again: a message that arrived while the kick was
    held (its send started nothing) starts the next dispatch at once."""
    qid = _consumer_queue(tenant, "kick-jobs")
    with db.connection() as conn:
        assert conn.execute("SELECT consumer_kick_take(%s, 60)", (qid,)).fetchone()[0]
    service.send_messages(tenant.principal, "kick-jobs", ["raced"])
    assert started == []  # the kick was held: this send started nothing
    monkeypatch.setattr(consumers, "_serve", lambda *args: 0)  # the running dispatch missed it
    consumers.dispatch_queue(qid, _only("kick-jobs"), budget_s=5)
    assert started == [qid]


def test_a_failed_start_never_fails_the_send(tenant):
    def broken(queue_id):
        raise RuntimeError("lambda unreachable")

    consumers.set_starter(broken)
    _consumer_queue(tenant, "kick-jobs")
    assert len(service.send_messages(tenant.principal, "kick-jobs", [1])) == 1


def test_slots_are_lease_rows_not_advisory_locks(tenant):
    qid = _consumer_queue(tenant, "kick-jobs", concurrency=1)
    service.send_messages(tenant.principal, "kick-jobs", [1])
    seen = []

    def invoke(tenant_id, function_name, payload):
        with db.connection() as conn:
            seen.append(conn.execute(
                "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'),"
                " (SELECT count(*) FROM consumer_slots WHERE queue_id = %s AND until > clock_timestamp())",
                (qid,)).fetchone())

    assert consumers.dispatch_queue(qid, invoke, budget_s=5) == 1
    assert seen == [(0, 1)]  # one slot held while the function ran, no advisory lock anywhere
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM consumer_slots WHERE queue_id = %s AND until > clock_timestamp()",
                            (qid,)).fetchone()[0] == 0


def test_a_dead_dispatchers_slot_frees_itself(tenant):
    qid = _consumer_queue(tenant, "kick-jobs", concurrency=1)
    service.send_messages(tenant.principal, "kick-jobs", [1])
    with db.connection() as conn:
        conn.execute("INSERT INTO consumer_slots (queue_id, slot, holder, until)"
                     " VALUES (%s, 0, gen_random_uuid(), clock_timestamp() + interval '1 hour')", (qid,))
    assert consumers.dispatch_queue(qid, _only("kick-jobs"), budget_s=2) == 0  # the slot is someone else's
    with db.connection() as conn:
        conn.execute("UPDATE consumer_slots SET until = clock_timestamp() - interval '1 second'"
                     " WHERE queue_id = %s", (qid,))
    assert consumers.dispatch_queue(qid, _only("kick-jobs"), budget_s=2) == 1


def test_on_aws_a_send_invokes_the_dispatcher_asynchronously():
    with mock_aws(config={"lambda": {"use_docker": False}}):
        client = boto3.client("lambda", region_name="us-east-1")
        role = boto3.client("iam", region_name="us-east-1").create_role(
            RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        client.create_function(FunctionName="postbox-prod-consumer-dispatch", Runtime="python3.12", Role=role,
                               Handler="h.h", Code={"ZipFile": b"x"})
        calls = []

        class Recording:
            def invoke(self, **kwargs):
                calls.append(kwargs)
                calls.append(client.invoke(**kwargs))
                return calls[-1]

        consumers.lambda_starter("postbox-prod-consumer-dispatch", Recording())(42)
        request, answer = calls
        assert request["FunctionName"] == "postbox-prod-consumer-dispatch"
        assert request["InvocationType"] == "Event"  # the send does not wait for the delivery
        assert json.loads(request["Payload"]) == {"queue_id": 42, "cell": "cell-1"}  # an id of that cell
        assert answer["StatusCode"] == 202


def test_the_dispatch_agent_serves_one_queue_when_a_send_started_it(tenant):
    from functions.agents import consumer_dispatch
    from functions.local.lambda_context import LocalContext

    qid = _consumer_queue(tenant, "kick-jobs")
    service.send_messages(tenant.principal, "kick-jobs", [1, 2, 3])
    answer = consumer_dispatch.handler({"queue_id": qid}, LocalContext("consumer-dispatch", 30))
    assert answer == {"delivered": 3}
    assert sorted(m["message"] for c in fn.calls for m in c["messages"]) == [1, 2, 3]


def test_back_pressure_is_the_age_of_the_oldest_deliverable_message(tenant, started):
    qid = _consumer_queue(tenant, "slow")
    service.send_messages(tenant.principal, "slow", [1])
    with db.connection() as conn:
        conn.execute("UPDATE queue_messages SET enqueued_at = clock_timestamp() - interval '1 day'"
                     " WHERE queue_id = %s", (qid,))
    assert consumers.oldest_waiting_age_s() >= 86400
    consumers.dispatch_queue(qid, _only("slow"), budget_s=5)
    with db.connection() as conn:  # delivered: this queue no longer holds anything back
        assert conn.execute("SELECT count(*) FROM queue_messages WHERE queue_id = %s", (qid,)).fetchone()[0] == 0


def test_on_aws_the_dispatcher_named_by_the_stack_is_the_one_started(monkeypatch):
    named = []
    monkeypatch.setattr(consumers, "lambda_starter", lambda name: named.append(name) or (lambda queue_id: None))
    consumers.set_starter(None)
    consumers.start_dispatch(7)  # no function configured (locally): nothing to start
    assert named == []
    monkeypatch.setenv("POSTBOX_CONSUMER_DISPATCH_FUNCTION", "postbox-prod-consumer-dispatch")
    config.reset()
    consumers.start_dispatch(7)
    consumers.start_dispatch(8)
    assert named == ["postbox-prod-consumer-dispatch"]  # one client per container, reused
