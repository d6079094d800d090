"""FIFO queues through boto3 over HTTP: a group's messages in order and one receive at a time
holding a group, deduplication by id and by content within five minutes, sequence numbers, FIFO's
own parameter rules, and two concurrent consumers that count every message."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from sqs_clients import code, error_of

from support.http import client


def fifo(sqs, name="jobs.fifo", **attributes) -> str:
    return sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"]


def test_a_fifo_queue_and_its_attributes(sqs):
    url = fifo(sqs, ContentBasedDeduplication="true")
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["FifoQueue"] == "true" and got["ContentBasedDeduplication"] == "true"
    assert got["DeduplicationScope"] == "queue" and got["FifoThroughputLimit"] == "perQueue"
    # A .fifo name is a FIFO queue's only, and FifoQueue true must say so (SQS makes no queue of the name alone).
    assert code(error_of(sqs.create_queue, QueueName="implied.fifo")) == "InvalidParameterValue"
    assert code(error_of(sqs.create_queue, QueueName="nofifo", Attributes={"FifoQueue": "true"})) == \
        "InvalidParameterValue"
    assert code(error_of(sqs.create_queue, QueueName="Upper.fifo", Attributes={"FifoQueue": "true"})) == \
        "InvalidParameterValue"


def test_order_within_a_group_and_a_group_held_while_in_flight(sqs):
    url = fifo(sqs)
    for i in range(4):
        sqs.send_message(QueueUrl=url, MessageBody=f"a{i}", MessageGroupId="A", MessageDeduplicationId=f"a{i}")
    sqs.send_message(QueueUrl=url, MessageBody="b0", MessageGroupId="B", MessageDeduplicationId="b0")
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=30)["Messages"]
    assert [m["Body"] for m in first] == ["a0", "a1"]
    # group A is in flight: another receive gets only group B
    other = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)["Messages"]
    assert [m["Body"] for m in other] == ["b0"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # a1 still in flight holds the group
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first[1]["ReceiptHandle"], VisibilityTimeout=0)
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    assert [m["Body"] for m in again] == ["a1", "a2", "a3"]
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    assert again[0]["Attributes"]["MessageGroupId"] == "A"
    assert again[0]["Attributes"]["MessageDeduplicationId"] == "a1"
    seqs = [int(m["Attributes"]["SequenceNumber"]) for m in again]
    assert seqs == sorted(seqs) and len(again[0]["Attributes"]["SequenceNumber"]) == 20


def test_deduplication_by_id_and_by_content(sqs):
    url = fifo(sqs, "dedup.fifo")
    one = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d1")
    two = sqs.send_message(QueueUrl=url, MessageBody="y", MessageGroupId="g", MessageDeduplicationId="d1")
    assert one["MessageId"] == two["MessageId"] and one["SequenceNumber"] == two["SequenceNumber"]
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "1", "MessageBody": "z", "MessageGroupId": "g", "MessageDeduplicationId": "d2"},
        {"Id": "2", "MessageBody": "w", "MessageGroupId": "g", "MessageDeduplicationId": "d2"},
        {"Id": "3", "MessageBody": "v", "MessageGroupId": "g", "MessageDeduplicationId": "d1"},
    ])
    ids = {s["Id"]: s["MessageId"] for s in batch["Successful"]}
    assert ids["1"] == ids["2"] and ids["3"] == one["MessageId"]
    bodies = [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]
    assert bodies == ["x", "z"]
    content = fifo(sqs, "content.fifo", ContentBasedDeduplication="true")
    a = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")
    b = sqs.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")
    c = sqs.send_message(QueueUrl=content, MessageBody="other", MessageGroupId="g")
    assert a["MessageId"] == b["MessageId"] != c["MessageId"]


def test_fifo_parameter_rules(sqs):
    url = fifo(sqs, "rules.fifo")
    assert code(error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")) == \
        "MissingParameter"
    assert code(error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g")) == \
        "InvalidParameterValue"  # no deduplication id and no content-based deduplication
    assert code(error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g",
                         MessageDeduplicationId="d", DelaySeconds=1)) == "InvalidParameterValue"
    assert code(error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="has space",
                         MessageDeduplicationId="d")) == "InvalidParameterValue"
    standard = sqs.create_queue(QueueName="std")["QueueUrl"]
    assert code(error_of(sqs.send_message, QueueUrl=standard, MessageBody="x", MessageDeduplicationId="d")) == \
        "InvalidParameterValue"
    assert code(error_of(sqs.set_queue_attributes, QueueUrl=standard,
                         Attributes={"ContentBasedDeduplication": "true"})) == "InvalidAttributeName"


def test_a_fifo_batch_with_an_entry_naming_no_group_or_no_deduplication_id_is_refused_whole(sqs):
    url = fifo(sqs, "whole.fifo")
    good = {"Id": "good", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "a"}
    e = error_of(sqs.send_message_batch, QueueUrl=url, Entries=[good, {"Id": "nogroup", "MessageBody": "b",
                                                                        "MessageDeduplicationId": "b"}])
    assert code(e) == "MissingParameter" and e.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    e = error_of(sqs.send_message_batch, QueueUrl=url, Entries=[good, {"Id": "nodedup", "MessageBody": "b",
                                                                        "MessageGroupId": "g"}])
    assert code(e) == "InvalidParameterValue" and "ContentBasedDeduplication" in e.response["Error"]["Message"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert got["Attributes"]["ApproximateNumberOfMessages"] == "0"  # the good entries were not sent either
    bad_group = sqs.send_message_batch(QueueUrl=url, Entries=[good, {**good, "Id": "spaced", "MessageGroupId": "a b"}])
    assert [e["Id"] for e in bad_group["Successful"]] == ["good"]  # a malformed group still fails alone
    assert [e["Id"] for e in bad_group["Failed"]] == ["spaced"]


def test_a_fifo_send_takes_delay_seconds_zero_and_keeps_the_queues_delay(sqs):
    """SQS refuses a per-message delay on a FIFO queue but takes DelaySeconds 0 (which SDKs and
    frameworks send by default), and the queue's own DelaySeconds still applies."""
    url = fifo(sqs, "zero.fifo", DelaySeconds="2")
    sqs.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="a", DelaySeconds=0)
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "b", "MessageBody": "b", "MessageGroupId": "g", "MessageDeduplicationId": "b", "DelaySeconds": 0}])
    assert [e["Id"] for e in sent["Successful"]] == ["b"] and not sent.get("Failed")
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert got["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "2"
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    time.sleep(2.5)
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)["Messages"]
    assert [m["Body"] for m in received] == ["a", "b"]


def test_two_concurrent_consumers_keep_each_groups_order_and_count_every_message(sqs, client_for):
    url = fifo(sqs, "orders.fifo", ContentBasedDeduplication="true")
    groups, per_group = 6, 25
    for start in range(0, per_group, 5):
        for g in range(groups):
            sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "MessageBody": f"g{g}:{i}", "MessageGroupId": f"g{g}"} for i in range(start, start + 5)])
    seen: dict[str, list[int]] = defaultdict(list)
    holders: dict[str, str] = {}
    lock = threading.Lock()
    violations: list[str] = []

    def consume(who: str) -> None:
        client = client_for("write")
        idle_since = None
        while True:
            got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=3, VisibilityTimeout=30).get("Messages", [])
            if not got:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 2:
                    return
                continue
            idle_since = None
            with lock:
                for m in got:
                    group, n = m["Body"].split(":")
                    if holders.get(group) not in (None, who):
                        violations.append(f"{group} held by {holders[group]} and {who}")
                    holders[group] = who
                    seen[group].append(int(n))
            time.sleep(0.01)
            with lock:  # the group is free again once its messages are deleted
                for m in got:
                    holders.pop(m["Body"].split(":")[0], None)
            client.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])

    threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not violations
    assert sum(len(v) for v in seen.values()) == groups * per_group
    for g in range(groups):
        assert seen[f"g{g}"] == list(range(per_group)), g


def test_the_queues_api_sees_a_fifo_queue(sqs, gateway, tenant):
    url = fifo(sqs, "seen.fifo", ContentBasedDeduplication="true")
    sqs.send_message(QueueUrl=url, MessageBody="in order", MessageGroupId="g")
    with client(gateway.url, tenant.key) as api:
        doc = api.get("/api/v1/queues/seen.fifo")
        assert doc.status_code == 200 and doc.json()["metrics"]["queue_length"] == 1
        assert "seen.fifo" in [q["name"] for q in api.get("/api/v1/queues").json()["queues"]]
        (m,) = api.get("/api/v1/queues/seen.fifo/messages").json()["messages"]
        assert m["message"] == "in order" and m["headers"]["sqs"]["g"] == "g"
