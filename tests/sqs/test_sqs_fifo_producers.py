"""FIFO queues under concurrent producers of one group: a group's messages commit in the order
their ids (SequenceNumbers) were drawn, so a receive never hands out a later message of a group
while an earlier one is still being sent, and a group's SequenceNumbers only grow."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from itertools import pairwise

from postbox import db, tenancy


def fifo(sqs, name: str) -> str:
    return sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]


def _drain(client, url: str, seen: dict[str, list[int]], lock: threading.Lock, idle_s: float = 2.0) -> None:
    """Receive and delete until the queue stays empty for idle_s, recording each group's
    SequenceNumbers in the order received (a group has one holder at a time, so this is its order)."""
    idle_since = None
    while True:
        got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30,
                                     AttributeNames=["All"]).get("Messages", [])
        if not got:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > idle_s:
                return
            continue
        idle_since = None
        with lock:
            for m in got:
                seen[m["Attributes"]["MessageGroupId"]].append(int(m["Attributes"]["SequenceNumber"]))
        client.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])


def test_a_send_of_a_group_waits_for_the_groups_earlier_send_to_commit(sqs, client_for, tenant):
    """Deterministic: a send of group G held open in a transaction (its id drawn, not committed);
    a second send of G meanwhile must not be received before it, nor after it with a lower number."""
    url = fifo(sqs, "held.fifo")
    consumer = client_for("write")
    headers = json.dumps({"sqs": {"s": "test", "g": "G", "d": "first"}})
    second: dict = {}
    with db.transaction() as conn:
        conn.execute("SELECT * FROM sqs_send(%s, %s, %s, %s::text[], %s::int[], %s::float8[], %s::jsonb[], %s::text[])",
                     (tenant.tenant_id, tenancy.project_id(tenant.principal), "held.fifo", ['"first"'], [7], [0.0],
                      [headers], ["first"]))
        sender = threading.Thread(target=lambda: second.update(sqs.send_message(
            QueueUrl=url, MessageBody="second", MessageGroupId="G", MessageDeduplicationId="second")))
        sender.start()
        time.sleep(1.5)  # the second send has had time to commit, were it not waiting for the first
        early = consumer.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])
        assert [m["Body"] for m in early] == []  # "second" handed out before "first" was even sent
        assert sender.is_alive()
    sender.join(30)
    assert second["SequenceNumber"]
    seen: dict[str, list[int]] = defaultdict(list)
    bodies = []
    while got := consumer.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                          AttributeNames=["All"]).get("Messages", []):
        for m in got:
            bodies.append(m["Body"])
            seen["G"].append(int(m["Attributes"]["SequenceNumber"]))
            consumer.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert bodies == ["first", "second"]
    assert seen["G"] == sorted(seen["G"]) and seen["G"][-1] == int(second["SequenceNumber"])


def test_concurrent_producers_of_few_groups_and_two_consumers_count_every_message_in_order(sqs, client_for):
    """Mostly single-message sends, so the consumers keep up with the producers and receive each
    message as soon as it commits: without the group lock, a group went backwards in most runs."""
    url = fifo(sqs, "busy.fifo")
    producers, batches = 6, 100
    sizes = [3 if b % 10 == 9 else 1 for b in range(batches)]  # a few batches span groups
    groups = ["hot", "hot", "hot", "warm", "cold"]  # most sends hit one group
    sent: list[tuple[str, int]] = []
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    failures: list[str] = []
    producing = threading.Event()

    def produce(p: int) -> None:
        client = client_for("write")
        try:
            for b, size in enumerate(sizes):
                entries = [{"Id": str(i), "MessageBody": f"p{p}b{b}i{i}", "MessageGroupId": groups[(p + b + i) % 5],
                            "MessageDeduplicationId": f"p{p}b{b}i{i}"} for i in range(size)]
                done = client.send_message_batch(QueueUrl=url, Entries=entries)
                if done.get("Failed"):
                    failures.append(str(done["Failed"]))
                with lock:
                    sent.extend((e["MessageGroupId"], int(s["SequenceNumber"]))
                                for e, s in zip(entries, done["Successful"], strict=True))
        except Exception as e:  # a producer's failure fails the test by name
            failures.append(f"producer {p}: {e!r}")

    def consume() -> None:
        try:
            producing.wait(30)
            _drain(client_for("write"), url, seen, lock)
        except Exception as e:
            failures.append(f"consumer: {e!r}")

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    threads += [threading.Thread(target=consume) for _ in range(2)]
    for t in threads:
        t.start()
    producing.set()
    for t in threads:
        t.join(180)
    assert not failures
    assert len(sent) == producers * sum(sizes)
    received = [(g, n) for g, ns in seen.items() for n in ns]
    assert sorted(received) == sorted(sent)  # every message received, and exactly once
    for group, numbers in seen.items():
        backwards = [(a, b) for a, b in pairwise(numbers) if b <= a]
        assert not backwards, f"group {group} went backwards: {backwards[:5]}"
