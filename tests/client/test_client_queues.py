"""The queue client against the local gateway: every call, typed results and errors, the consume
loop (visibility extended while the handler runs, archive on success, back to the queue on error),
and dead-letter replay."""

from __future__ import annotations

import threading
import time

import pytest

from postbox_client import Client, Conflict, Message, NotFound, Unauthorized, ValidationFailed


def test_queue_calls_round_trip(pb):
    queue = pb.queues.create("jobs", visibility_timeout_sec=30, description="work")
    assert queue.name == "jobs" and queue.visibility_timeout_sec == 30 and queue.raw["description"] == "work"
    first = pb.queues.send("jobs", {"n": 1}, headers={"trace": "t1"})
    more = pb.queues.send_batch("jobs", [{"n": 2}, {"n": 3}])
    assert first < more[0] < more[1]
    listed = {q.name: q for q in pb.queues.list()}
    assert listed["jobs"].queue_length == 3 and listed["jobs"].oldest_age_sec is not None
    read = pb.queues.read("jobs", 2, vt=60)
    assert [m.message for m in read] == [{"n": 1}, {"n": 2}] and all(isinstance(m, Message) for m in read)
    assert read[0].headers == {"trace": "t1"} and read[0].read_ct == 1
    assert pb.queues.metrics("jobs").in_flight == 2
    assert pb.queues.archive("jobs", [read[0].msg_id]) == [read[0].msg_id]
    assert pb.queues.archive("jobs", [read[0].msg_id]) == []  # archiving again is harmless: nothing waits
    moved = pb.queues.set_vt("jobs", read[1].msg_id, 0)
    assert moved.msg_id == read[1].msg_id
    page = pb.queues.browse("jobs", "archived")
    assert [m.msg_id for m in page.messages] == [read[0].msg_id]
    assert pb.queues.pop("jobs")[0].message == {"n": 2}
    assert pb.queues.delete_messages("jobs", [more[1]]) == [more[1]]
    pb.queues.send("jobs", "left")
    assert pb.queues.purge("jobs", include_archived=True) == 2  # the waiting one and the archived one
    assert pb.queues.update("jobs", max_reads=3).max_reads == 3
    assert pb.queues.delete("jobs")["deleted"] is True


def test_errors_are_typed_with_status_and_code(pb, gateway):
    with pytest.raises(NotFound) as missing:
        pb.queues.get("nope")
    assert missing.value.status == 404 and missing.value.code == "not_found" and "queue" in missing.value.message
    pb.queues.create("dup")
    with pytest.raises(Conflict) as taken:
        pb.queues.create("dup")
    assert taken.value.status == 409
    with pytest.raises(ValidationFailed) as invalid:
        pb.queues.read("dup", qty=1000)
    assert invalid.value.code == "validation" and "qty" in invalid.value.message
    with Client(gateway.url, "pbk_not_a_real_key") as stranger, pytest.raises(Unauthorized) as refused:
        stranger.queues.list()
    assert refused.value.status == 401 and refused.value.method == "GET"


def test_request_id_comes_from_the_gateway_answer(pb):
    with pytest.raises(NotFound) as missing:
        pb.queues.get("nope")
    assert missing.value.request_id  # API Gateway's apigw-requestid, which the local gateway sends too
    assert missing.value.request_id in str(missing.value)


def test_receive_long_polls_until_a_message_comes(pb):
    pb.queues.create("slow")
    late = threading.Timer(0.5, lambda: pb.queues.send("slow", "late"))
    late.start()
    got = pb.queues.receive("slow", wait_seconds=10)
    late.join(timeout=10)  # its answer may come after the receive's: the client closes after both
    assert [m.message for m in got] == ["late"]


def test_consume_extends_visibility_while_the_handler_runs(pb):
    """The handler outlives the 2 s visibility timeout several times over; the heartbeat keeps the
    message hidden, so reads by others during that time find nothing (without it they would)."""
    pb.queues.create("long", visibility_timeout_sec=2)
    pb.queues.send("long", "slow job")
    seen_by_others: list[list[Message]] = []

    def handler(message: Message) -> None:
        end = time.monotonic() + 5
        while time.monotonic() < end:
            seen_by_others.append(pb.queues.read("long", 1, vt=60))
            time.sleep(0.25)

    assert pb.queues.consume("long", handler, vt=2, max_messages=1, until_empty=True) == 1
    assert len(seen_by_others) > 4 and all(found == [] for found in seen_by_others)
    assert [m.message for m in pb.queues.browse("long", "archived").messages] == ["slow job"]
    assert pb.queues.metrics("long").queue_length == 0


def test_consume_leaves_a_failed_message_and_dead_letters_it_after_max_reads(pb):
    pb.queues.create("long-dead")
    pb.queues.create("flaky", max_reads=2, dead_letter_queue="long-dead")
    pb.queues.send_batch("flaky", ["ok", "bad"])
    attempts: list[str] = []

    def handler(message: Message) -> None:
        attempts.append(message.message)
        if message.message == "bad":
            raise RuntimeError("cannot")

    done = pb.queues.consume("flaky", handler, batch=10, vt=30, retry_delay=0, until_empty=True)
    assert done == 1 and attempts == ["ok", "bad", "bad"]  # read twice, then moved to the dead letters
    assert [m.message for m in pb.queues.browse("flaky", "archived").messages] == ["ok"]
    dead = pb.queues.dead_letters("flaky")
    assert [m.message for m in dead] == ["bad"] and dead[0].dead_lettered


def test_two_consumers_handle_every_message_exactly_once(pb):
    pb.queues.create("shared")
    sent = set()
    for i in range(0, 60, 20):
        sent |= set(pb.queues.send_batch("shared", [{"i": i + j} for j in range(20)]))
    handled: list[int] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            handled.append(message.msg_id)

    counts: list[int] = []
    threads = [threading.Thread(target=lambda: counts.append(
        pb.queues.consume("shared", handler, batch=5, vt=60, until_empty=True))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(handled) == sorted(sent) and sum(counts) == 60
    assert pb.queues.metrics("shared").archived == 60


def _dead_letter(pb, queue: str, message) -> None:
    """Send, read once with no visibility timeout, and let the next read dead-letter it (max_reads 1)."""
    pb.queues.send(queue, message)
    assert len(pb.queues.read(queue, 1, vt=0)) == 1
    assert pb.queues.read(queue, 1, vt=0) == []


def test_replay_moves_dead_letters_back_from_the_dead_letter_queue(pb):
    pb.queues.create("orders-dead")
    pb.queues.create("orders", max_reads=1, dead_letter_queue="orders-dead")
    _dead_letter(pb, "orders", {"order": 1})
    _dead_letter(pb, "orders", {"order": 2})
    assert sorted(m.message["order"] for m in pb.queues.dead_letters("orders")) == [1, 2]
    progressed: list[int] = []
    new_ids = pb.queues.replay_dead("orders", progress=progressed.append)
    assert len(new_ids) == 2 and sum(progressed) == 2
    assert pb.queues.dead_letters("orders") == [] and pb.queues.metrics("orders-dead").queue_length == 0
    assert sorted(m.message["order"] for m in pb.queues.browse("orders").messages) == [1, 2]


def test_replay_without_a_dead_letter_queue_sends_archived_dead_letters_again(pb):
    pb.queues.create("solo", max_reads=1)
    _dead_letter(pb, "solo", "again")
    [dead] = pb.queues.dead_letters("solo")
    assert dead.dead_lettered and dead.archived_at is not None
    assert pb.queues.replay_dead("solo", [dead.msg_id]) != []
    assert [m.message for m in pb.queues.browse("solo").messages] == ["again"]
