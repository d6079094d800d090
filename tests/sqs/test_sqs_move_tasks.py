"""Message move tasks through boto3 over HTTP, moved by the sqs-move-tasks agent: a task runs in
the background at its MaxNumberOfMessagesPerSecond, is listed RUNNING then COMPLETED, can be
cancelled, and one source has one active task at a time. The agent's runs are called from the
tests, with a clock they control, so the elapsed time a run sees is exact and nobody waits for it;
where a run must find a task free (a second after its last batch), the test sleeps that second.
Every message is counted: each one is in exactly one queue."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter

import pytest
from sqs_clients import code, error_of

from functions.agents import sqs_move_tasks
from functions.local.lambda_context import LocalContext
from postbox import db, tenancy
from postbox.sqs import mover, moves

FREE_S = 1.1  # a task is free for the next batch a second after the last one (the start's, a run's end)


class FakeTime:
    """A clock that only moves when the run sleeps: a run's budget is spent in slices, not in waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def run_for(budget_s: float) -> int:
    fake = FakeTime()
    return mover.run(budget_s, fake.clock, fake.sleep)


@contextlib.contextmanager
def paused_run(budget_s: float):
    """An agent run on a thread of its own that stops at its first sleep (after its first slice)
    until the block ends; yields the list its moved count lands in once it has finished."""
    asleep, wake = threading.Event(), threading.Event()
    fake = FakeTime()

    def sleep(seconds: float) -> None:
        asleep.set()
        assert wake.wait(30)
        fake.sleep(seconds)

    done: list[int] = []
    runner = threading.Thread(target=lambda: done.append(mover.run(budget_s, fake.clock, sleep)))
    runner.start()
    try:
        assert asleep.wait(30)
        yield done
    finally:
        wake.set()
        runner.join(30)


def arn(sqs, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def bodies(tenant, name: str) -> Counter:
    """Every message waiting in a queue (visible or not), by body."""
    with db.connection() as conn:
        rows = conn.execute(
            "SELECT m.message #>> '{}' FROM queue_messages m JOIN queues q ON q.id = m.queue_id"
            " WHERE q.tenant_id = %s AND q.name = %s", (tenant.tenant_id, name)).fetchall()
    return Counter(r[0] for r in rows)


def send(sqs, url: str, texts: list[str]) -> None:
    for i in range(0, len(texts), 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(n), "MessageBody": t} for n, t in enumerate(texts[i:i + 10])])


def dead_letter_queue(sqs, name: str = "parked") -> str:
    """A dead-letter queue (of a queue made for it); messages sent to it come from no queue."""
    dlq = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.create_queue(QueueName=f"{name}-src", Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})})
    return dlq


def dead_letters(sqs, dlq: str, src: str, texts: list[str]) -> None:
    """`texts` sent to `src` (maxReceiveCount 1) and received until all are in `dlq`."""

    def waiting() -> int:
        got = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
        return int(got["Attributes"]["ApproximateNumberOfMessages"])

    before = waiting()
    send(sqs, src, texts)
    for _ in range(100):
        sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10, VisibilityTimeout=0)
        if waiting() == before + len(texts):
            return
    raise AssertionError("the messages did not all reach the dead-letter queue")


def task_of(sqs, dlq: str) -> dict:
    return sqs.list_message_move_tasks(SourceArn=arn(sqs, dlq))["Results"][0]


def moved_to(sqs, dlq: str, to: str, n: int, rate: int | None = None) -> tuple[str, list[str]]:
    """A task moving `n` messages sent to `dlq` on to `to` (its first batch moved), and their bodies."""
    texts = [f"m{i}" for i in range(n)]
    send(sqs, dlq, texts)
    extra = {"MaxNumberOfMessagesPerSecond": rate} if rate else {}
    handle = sqs.start_message_move_task(SourceArn=arn(sqs, dlq), DestinationArn=arn(sqs, to), **extra)["TaskHandle"]
    return handle, texts


def test_a_task_runs_in_the_background_back_to_each_source_and_completes(sqs, tenant):
    dlq = sqs.create_queue(QueueName="dead")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})
    a = sqs.create_queue(QueueName="a", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    b = sqs.create_queue(QueueName="b", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    dead_letters(sqs, dlq, a, [f"a{i}" for i in range(6)])
    dead_letters(sqs, dlq, b, [f"b{i}" for i in range(6)])
    started = time.time() * 1000
    handle = sqs.start_message_move_task(SourceArn=arn(sqs, dlq), MaxNumberOfMessagesPerSecond=5)["TaskHandle"]
    task = task_of(sqs, dlq)
    assert task["Status"] == "RUNNING" and task["TaskHandle"] == handle
    assert task["ApproximateNumberOfMessagesToMove"] == 12 and task["ApproximateNumberOfMessagesMoved"] == 5
    assert task["MaxNumberOfMessagesPerSecond"] == 5 and task["SourceArn"] == arn(sqs, dlq)
    assert "DestinationArn" not in task and "FailureReason" not in task
    assert abs(task["StartedTimestamp"] - started) < 60_000
    # The agent as the schedule runs it locally: every second, for a second (5 more each time).
    for moved in (10, 12):
        time.sleep(FREE_S)
        sqs_move_tasks.handler({}, LocalContext("sqs-move-tasks", 1))
        assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == moved
    task = task_of(sqs, dlq)
    assert task["Status"] == "COMPLETED" and "TaskHandle" not in task
    assert bodies(tenant, "a") == Counter(f"a{i}" for i in range(6))
    assert bodies(tenant, "b") == Counter(f"b{i}" for i in range(6))
    assert bodies(tenant, "dead") == Counter()
    got = sqs.receive_message(QueueUrl=a, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in got} == {"1"}  # received afresh


def test_the_rate_holds_a_run_to_its_elapsed_seconds(sqs, tenant):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    _, texts = moved_to(sqs, dlq, to, 20, rate=2)
    assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 2  # the start's first second
    time.sleep(FREE_S)
    run_for(4)  # four one-second slices of two
    task = task_of(sqs, dlq)
    assert task["Status"] == "RUNNING" and task["ApproximateNumberOfMessagesMoved"] == 10
    assert sum(bodies(tenant, "to").values()) == 10 and sum(bodies(tenant, "parked").values()) == 10
    time.sleep(FREE_S)
    run_for(2.5)  # slices at 0, 1 and 2 s
    assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 16
    time.sleep(FREE_S)
    run_for(60)  # ends when the task does
    task = task_of(sqs, dlq)
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 20
    assert bodies(tenant, "to") == Counter(texts) and bodies(tenant, "parked") == Counter()


def test_a_run_right_after_another_waits_for_the_next_second(sqs, tenant):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    moved_to(sqs, dlq, to, 10, rate=1)
    run_for(5)  # the start's second is not over: the task is not this run's
    assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 1
    time.sleep(FREE_S)
    run_for(2)
    run_for(2)  # nor is the last run's last second
    assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 3


def test_messages_sent_after_the_start_are_not_moved(sqs, tenant):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    _, texts = moved_to(sqs, dlq, to, 3, rate=1)
    send(sqs, dlq, ["late"])
    time.sleep(FREE_S)
    run_for(10)
    task = task_of(sqs, dlq)
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesToMove"] == 3
    assert sum(bodies(tenant, "to").values()) == 3 and sum(bodies(tenant, "parked").values()) == 1


def test_cancel_stops_a_task_and_answers_what_it_moved(sqs, tenant):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    handle, texts = moved_to(sqs, dlq, to, 10, rate=2)
    assert sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"] == 2
    task = task_of(sqs, dlq)
    assert task["Status"] == "CANCELLED" and "TaskHandle" not in task and task["ApproximateNumberOfMessagesMoved"] == 2
    time.sleep(FREE_S)
    run_for(10)
    assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 2
    assert sum(bodies(tenant, "to").values()) == 2
    assert bodies(tenant, "to") + bodies(tenant, "parked") == Counter(texts)  # nothing lost, nothing twice
    e = error_of(sqs.cancel_message_move_task, TaskHandle=handle)  # no longer running
    assert code(e) == "ResourceNotFoundException" and e.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    again = sqs.start_message_move_task(SourceArn=arn(sqs, dlq), DestinationArn=arn(sqs, to))["TaskHandle"]
    listed = sqs.list_message_move_tasks(SourceArn=arn(sqs, dlq), MaxResults=10)["Results"]
    assert [t["Status"] for t in listed] == ["COMPLETED", "CANCELLED"]  # the most recent first
    assert listed[0]["ApproximateNumberOfMessagesToMove"] == 8 and "MaxNumberOfMessagesPerSecond" not in listed[0]
    assert again != handle and bodies(tenant, "to") == Counter(texts)


def test_a_task_cancelled_while_a_run_moves_it_is_cancelling_until_that_run_stops(sqs, tenant):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    handle, texts = moved_to(sqs, dlq, to, 20, rate=2)
    time.sleep(FREE_S)
    with paused_run(10) as done:  # the run moved its first slice and waits for the next second
        assert sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"] == 4
        assert task_of(sqs, dlq)["Status"] == "CANCELLING"
        e = error_of(sqs.start_message_move_task, SourceArn=arn(sqs, dlq))
        assert code(e) == "InvalidParameterValue"
    assert done == [2]
    task = task_of(sqs, dlq)
    assert task["Status"] == "CANCELLED" and task["ApproximateNumberOfMessagesMoved"] == 4
    assert sum(bodies(tenant, "to").values()) == 4
    assert bodies(tenant, "to") + bodies(tenant, "parked") == Counter(texts)


def test_one_active_task_per_source(sqs):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    moved_to(sqs, dlq, to, 5, rate=1)
    e = error_of(sqs.start_message_move_task, SourceArn=arn(sqs, dlq), DestinationArn=arn(sqs, to))
    assert code(e) == "InvalidParameterValue" and e.response["Error"]["Message"] == (
        "There is already a task running. Only one active task is allowed for a source queue arn at a given time.")
    assert len(sqs.list_message_move_tasks(SourceArn=arn(sqs, dlq), MaxResults=10)["Results"]) == 1


def test_an_empty_dead_letter_queue_completes_at_once(sqs):
    dlq = dead_letter_queue(sqs)
    sqs.start_message_move_task(SourceArn=arn(sqs, dlq))
    task = task_of(sqs, dlq)
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == task["ApproximateNumberOfMessagesToMove"] == 0


def test_a_run_that_dies_between_batches_loses_and_repeats_nothing(sqs, tenant):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    _, texts = moved_to(sqs, dlq, to, 30, rate=4)
    time.sleep(FREE_S)
    fake = FakeTime()
    slept: list[float] = []

    def dying(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise RuntimeError("the run dies")
        fake.sleep(seconds)

    with pytest.raises(RuntimeError):
        mover.run(10, fake.clock, dying)
    assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 4 + 8
    assert sum(bodies(tenant, "to").values()) == 12
    assert bodies(tenant, "to") + bodies(tenant, "parked") == Counter(texts)
    time.sleep(FREE_S)
    run_for(60)
    assert task_of(sqs, dlq)["Status"] == "COMPLETED" and bodies(tenant, "to") == Counter(texts)


def test_two_drivers_of_one_task_at_once_move_every_message_exactly_once(sqs, tenant):
    """What happens when a run's lease runs out while it still moves and another run takes the task:
    both move it at once, batch by batch."""
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    handle, texts = moved_to(sqs, dlq, to, 400, rate=25)

    totals: list[int] = []
    failures: list[BaseException] = []
    go = threading.Barrier(2)

    def drive() -> None:
        try:
            fake = FakeTime()
            go.wait(10)
            totals.append(mover.drive({uuid.UUID(moves.read_handle(handle)[0]): 25}, 100, fake.clock, fake.sleep))
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            failures.append(e)

    threads = [threading.Thread(target=drive) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures and len(totals) == 2
    assert sum(totals) == 400 - 25 and all(totals)  # both moved some
    task = task_of(sqs, dlq)
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 400
    assert bodies(tenant, "to") == Counter(texts) and bodies(tenant, "parked") == Counter()


def test_a_run_while_another_holds_the_task_leaves_it_alone(sqs, tenant):
    """Two agent runs at once (a retry on AWS, a slow run locally): the task moves at its rate, not twice it."""
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    _, texts = moved_to(sqs, dlq, to, 100, rate=10)
    time.sleep(FREE_S)
    with paused_run(3) as done:  # the first run holds the task, between two of its slices
        run_for(3)
        assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 10 + 10
    assert done == [30]
    assert task_of(sqs, dlq)["ApproximateNumberOfMessagesMoved"] == 10 + 30
    assert bodies(tenant, "to") + bodies(tenant, "parked") == Counter(texts)


def test_bad_handles_rates_and_sources_are_refused(sqs, client_for):
    dlq = dead_letter_queue(sqs)
    for bad in (0, 501, -1):
        e = error_of(sqs.start_message_move_task, SourceArn=arn(sqs, dlq), MaxNumberOfMessagesPerSecond=bad)
        assert code(e) == "InvalidParameterValue", bad
    for bad in (0, 11):
        assert code(error_of(sqs.list_message_move_tasks, SourceArn=arn(sqs, dlq), MaxResults=bad)) == \
            "InvalidParameterValue"
    for bad in ("not-a-handle", "00000000-0000-0000-0000-000000000000", moves.task_handle("x", "y")[:-4]):
        e = error_of(sqs.cancel_message_move_task, TaskHandle=bad)
        assert code(e) == "InvalidParameterValue", bad
        assert e.response["Error"]["Message"] == "Value for parameter TaskHandle is invalid."
    for task_id in ("not-a-uuid", str(uuid.uuid4())):
        e = error_of(sqs.cancel_message_move_task, TaskHandle=moves.task_handle(task_id, arn(sqs, dlq)))
        assert code(e) == "ResourceNotFoundException" and e.response["Error"]["Message"] == "Task does not exist."
    assert code(error_of(sqs.start_message_move_task, SourceArn=arn(sqs, dlq),
                         DestinationArn=arn(sqs, dlq))) == "InvalidParameterValue"
    for parameter in ("SourceArn", "DestinationArn"):
        e = error_of(sqs.start_message_move_task, **{"SourceArn": arn(sqs, dlq),
                                                     parameter: arn(sqs, dlq).replace("parked", "absent")})
        assert code(e) == "ResourceNotFoundException" and e.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        assert e.response["Error"]["Message"] == \
            f"The resource that you specified for the {parameter} parameter doesn't exist."
    # A running task of one tenant is no task for another, nor for a read credential.
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    handle, _ = moved_to(sqs, dlq, to, 3, rate=1)
    assert code(error_of(client_for("read").cancel_message_move_task, TaskHandle=handle)) == "AccessDenied"
    assert sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"] == 1


def test_another_tenants_task_is_not_found(sqs, gateway, mint, make_tenant):
    from sqs_clients import sqs_client

    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    handle, _ = moved_to(sqs, dlq, to, 3, rate=1)
    other = sqs_client(gateway.url, mint("manage", tenant_id=make_tenant().tenant_id))
    assert code(error_of(other.cancel_message_move_task, TaskHandle=handle)) == "ResourceNotFoundException"
    assert task_of(sqs, dlq)["Status"] == "RUNNING"


def test_a_task_whose_destination_is_deleted_fails_and_keeps_the_rest(sqs, tenant):
    dlq = dead_letter_queue(sqs)
    to = sqs.create_queue(QueueName="to")["QueueUrl"]
    handle, _ = moved_to(sqs, dlq, to, 5, rate=1)
    sqs.delete_queue(QueueUrl=to)
    time.sleep(FREE_S)
    run_for(10)
    task = task_of(sqs, dlq)
    assert task["Status"] == "FAILED" and task["FailureReason"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert task["ApproximateNumberOfMessagesMoved"] == 1 and "TaskHandle" not in task
    assert sum(bodies(tenant, "parked").values()) == 4
    assert code(error_of(sqs.cancel_message_move_task, TaskHandle=handle)) == "ResourceNotFoundException"


def test_two_starts_at_once_make_one_task(sqs, gateway, mint, tenant):
    from sqs_clients import sqs_client

    dlq = dead_letter_queue(sqs)
    send(sqs, dlq, [f"m{i}" for i in range(5)])
    clients = [sqs_client(gateway.url, mint("manage")) for _ in range(2)]
    go = threading.Barrier(2)
    outcomes: list[str] = []

    def start(client) -> None:
        go.wait(10)
        try:
            client.start_message_move_task(SourceArn=arn(sqs, dlq), DestinationArn=arn(sqs, dlq.replace(
                "parked", "parked-src")), MaxNumberOfMessagesPerSecond=1)
            outcomes.append("started")
        except Exception as e:  # noqa: BLE001 - the refusal is the outcome looked for
            outcomes.append(code(e))

    threads = [threading.Thread(target=start, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["InvalidParameterValue", "started"]
    assert len(sqs.list_message_move_tasks(SourceArn=arn(sqs, dlq), MaxResults=10)["Results"]) == 1


def test_a_move_into_a_fifo_queue_waits_for_its_groups_turn(sqs, client_for, tenant):
    """Deterministic: a send of group G to the destination held open in a transaction (its id drawn,
    not committed); a move of G's messages into it meanwhile must wait for that send, so nothing of G
    is received before the held message, and G's SequenceNumbers only grow."""
    fifo = {"FifoQueue": "true"}
    dlq = sqs.create_queue(QueueName="parked.fifo", Attributes=fifo)["QueueUrl"]
    sqs.create_queue(QueueName="parked-src.fifo", Attributes={**fifo, "RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})})
    to = sqs.create_queue(QueueName="to.fifo", Attributes=fifo)["QueueUrl"]
    sqs.send_message(QueueUrl=dlq, MessageBody="moved", MessageGroupId="G", MessageDeduplicationId="moved")
    consumer = client_for("write")
    started: dict = {}
    headers = json.dumps({"sqs": {"s": "test", "g": "G", "d": "held"}})
    with db.transaction() as conn:
        conn.execute("SELECT * FROM sqs_send(%s, %s, %s, %s::text[], %s::int[], %s::float8[], %s::jsonb[], %s::text[])",
                     (tenant.tenant_id, tenancy.project_id(tenant.principal), "to.fifo", ['"held"'], [6], [0.0],
                      [headers], ["held"]))
        mover_thread = threading.Thread(target=lambda: started.update(sqs.start_message_move_task(
            SourceArn=arn(sqs, dlq), DestinationArn=arn(sqs, to))))
        mover_thread.start()
        time.sleep(1.5)  # the start's first batch has had time to move, were it not waiting for the send
        early = consumer.receive_message(QueueUrl=to, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])
        assert [m["Body"] for m in early] == []  # "moved" handed out before "held" was even sent
        assert mover_thread.is_alive()
    mover_thread.join(30)
    assert started["TaskHandle"]
    got = consumer.receive_message(QueueUrl=to, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    assert [m["Body"] for m in got] == ["held", "moved"]
    numbers = [int(m["Attributes"]["SequenceNumber"]) for m in got]
    assert numbers == sorted(numbers)
