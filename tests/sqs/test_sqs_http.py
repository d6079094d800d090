"""SQS over HTTP as its users drive it (boto3): bodies and attributes of every type with the MD5
digests checked against moto's independent implementation, system attributes, delays, visibility,
long polls, receipt handles, batches with partial failures, and SQS's limits and errors."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from sqs_clients import ATTRIBUTES, code, error_of, moto_md5

from postbox import config, wait_slots
from support.http import client


def received(sqs, url, **kwargs) -> list[dict]:
    return sqs.receive_message(QueueUrl=url, **kwargs).get("Messages", [])


def test_send_and_receive_with_every_attribute_type_and_their_digests(sqs):
    url = sqs.create_queue(QueueName="typed")["QueueUrl"]
    body = "body with ünïcode and 🎉 emoji\n\ttabs"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES,
                            MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String",
                                                                        "StringValue": "Root=1-abc"}})
    body_md5, attributes_md5 = moto_md5(body, ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == body_md5 and sent["MD5OfMessageAttributes"] == attributes_md5
    assert sent["MD5OfMessageSystemAttributes"]
    (m,) = received(sqs, url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"])
    assert m["Body"] == body and m["MD5OfBody"] == body_md5 and m["MessageId"] == sent["MessageId"]
    assert m["MessageAttributes"] == ATTRIBUTES and m["MD5OfMessageAttributes"] == attributes_md5
    attrs = m["Attributes"]
    assert attrs["ApproximateReceiveCount"] == "1" and attrs["AWSTraceHeader"] == "Root=1-abc"
    assert attrs["SenderId"].startswith("PBSQ")
    assert int(attrs["SentTimestamp"]) <= int(attrs["ApproximateFirstReceiveTimestamp"]) <= time.time() * 1000 + 5000


def test_only_the_attributes_asked_for_are_answered(sqs):
    url = sqs.create_queue(QueueName="picked")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={
        "color.red": {"DataType": "String", "StringValue": "r"}, "color.blue": {"DataType": "String",
                                                                                "StringValue": "b"},
        "size": {"DataType": "Number", "StringValue": "3"}})
    (m,) = received(sqs, url, MessageAttributeNames=["color.*"], AttributeNames=["SentTimestamp"], VisibilityTimeout=0)
    assert set(m["MessageAttributes"]) == {"color.red", "color.blue"} and set(m["Attributes"]) == {"SentTimestamp"}
    assert m["MD5OfMessageAttributes"] == moto_md5("x", m["MessageAttributes"])[1]
    (m,) = received(sqs, url, VisibilityTimeout=0)
    assert "MessageAttributes" not in m and "Attributes" not in m
    (m,) = received(sqs, url, MessageAttributeNames=["size"], VisibilityTimeout=0)
    assert set(m["MessageAttributes"]) == {"size"}
    # SQS's prefix is what comes before `.*`, the dot not included; `*` alone asks for all
    (m,) = received(sqs, url, MessageAttributeNames=["col.*", "si.*"], VisibilityTimeout=0)
    assert set(m["MessageAttributes"]) == {"color.red", "color.blue", "size"}
    (m,) = received(sqs, url, MessageAttributeNames=["*"], VisibilityTimeout=0)
    assert set(m["MessageAttributes"]) == {"color.red", "color.blue", "size"}


def test_receive_count_first_receive_and_visibility(sqs):
    url = sqs.create_queue(QueueName="vis", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    (first,) = received(sqs, url, AttributeNames=["All"])
    assert received(sqs, url) == []  # hidden for the queue's second
    time.sleep(1.3)
    (second,) = received(sqs, url, AttributeNames=["All"], VisibilityTimeout=30)
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert second["Attributes"]["ApproximateFirstReceiveTimestamp"] == first["Attributes"][
        "ApproximateFirstReceiveTimestamp"]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    # the older receipt is stale for a visibility change, as SQS's "receipt handle has expired"
    e = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                 VisibilityTimeout=0)
    assert code(e) == "InvalidParameterValue" and "expired" in e.response["Error"]["Message"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0)
    (third,) = received(sqs, url)
    assert third["Body"] == "again"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])  # any receipt of it deletes, as SQS
    assert received(sqs, url, VisibilityTimeout=0) == []
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])  # gone already: no error


def test_change_visibility_of_a_visible_message_is_not_in_flight(sqs):
    url = sqs.create_queue(QueueName="inflight")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    (m,) = received(sqs, url, VisibilityTimeout=30)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    e = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=5)
    assert code(e) == "AWS.SimpleQueueService.MessageNotInflight"


def test_receipt_handles_are_checked(sqs):
    url = sqs.create_queue(QueueName="handles")["QueueUrl"]
    other = sqs.create_queue(QueueName="handles-other")["QueueUrl"]
    sqs.send_message(QueueUrl=other, MessageBody="m")
    (m,) = received(sqs, other)
    for bad in ("garbage", base64.b64encode(b"1:2").decode(), m["ReceiptHandle"]):  # the last is another queue's
        assert code(error_of(sqs.delete_message, QueueUrl=url, ReceiptHandle=bad)) == "ReceiptHandleIsInvalid"
        assert code(error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=bad,
                             VisibilityTimeout=1)) == "ReceiptHandleIsInvalid"


def test_delays_per_queue_and_per_message(sqs):
    url = sqs.create_queue(QueueName="delayed", Attributes={"DelaySeconds": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="queue-delay")
    sqs.send_message(QueueUrl=url, MessageBody="now", DelaySeconds=0)
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
    assert [m["Body"] for m in received(sqs, url, MaxNumberOfMessages=10)] == ["now"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert got["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "2"
    time.sleep(1.2)
    assert [m["Body"] for m in received(sqs, url, MaxNumberOfMessages=10)] == ["queue-delay"]
    time.sleep(1.0)
    assert [m["Body"] for m in received(sqs, url, MaxNumberOfMessages=10)] == ["later"]
    assert code(error_of(sqs.send_message, QueueUrl=url, MessageBody="x", DelaySeconds=901)) == "InvalidParameterValue"


def test_long_poll_wakes_on_a_send(sqs):
    url = sqs.create_queue(QueueName="poll")["QueueUrl"]
    out: dict = {}

    def wait():
        started = time.monotonic()
        out["messages"] = received(sqs, url, WaitTimeSeconds=10)
        out["took"] = time.monotonic() - started

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    sqs.send_message(QueueUrl=url, MessageBody="wake")
    t.join(15)
    assert [m["Body"] for m in out["messages"]] == ["wake"] and out["took"] < 5
    started = time.monotonic()
    assert received(sqs, url, WaitTimeSeconds=1) == []
    assert time.monotonic() - started >= 0.9
    assert code(error_of(sqs.receive_message, QueueUrl=url, WaitTimeSeconds=21)) == "InvalidParameterValue"


def test_a_receive_over_the_tenants_cap_of_waits_is_request_throttled(sqs, tenant, monkeypatch):
    """SQS's own answer to too many requests, which SDKs retry; it has waited for nothing."""
    monkeypatch.setenv("POSTBOX_WAITS_PER_TENANT", "1")
    config.reset()
    url = sqs.create_queue(QueueName="capped")["QueueUrl"]
    with wait_slots.held(wait_slots.caller(tenant.principal), 30):  # the tenant's one slot, taken
        refused = error_of(sqs.receive_message, QueueUrl=url, WaitTimeSeconds=10)
    # 403, as SQS's model gives RequestThrottled
    assert code(refused) == "RequestThrottled" and refused.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert int(refused.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"]) >= 1
    assert received(sqs, url, WaitTimeSeconds=1) == []  # the slot given back: it waits again


def test_the_queues_wait_time_is_the_default_long_poll(sqs):
    url = sqs.create_queue(QueueName="poll-attr", Attributes={"ReceiveMessageWaitTimeSeconds": "1"})["QueueUrl"]
    started = time.monotonic()
    assert received(sqs, url) == []
    assert time.monotonic() - started >= 0.9


def test_batches_and_their_partial_failures(sqs):
    url = sqs.create_queue(QueueName="batches")["QueueUrl"]
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "ok1", "MessageBody": "one"},
        {"Id": "bad-attr", "MessageBody": "two", "MessageAttributes": {"AWS.x": {"DataType": "String",
                                                                                  "StringValue": "v"}}},
        {"Id": "ok2", "MessageBody": "three", "MessageAttributes": {"k": {"DataType": "Number",
                                                                          "StringValue": "7"}}},
        {"Id": "bad-delay", "MessageBody": "four", "DelaySeconds": 1000},
        {"Id": "bad-body", "MessageBody": "not XML text \ufffe"},
    ])
    assert [s["Id"] for s in answer["Successful"]] == ["ok1", "ok2"]
    assert answer["Successful"][1]["MD5OfMessageAttributes"] == moto_md5("three", {"k": {
        "DataType": "Number", "StringValue": "7"}})[1]
    failed = {f["Id"]: f for f in answer["Failed"]}
    assert set(failed) == {"bad-attr", "bad-delay", "bad-body"} and all(f["SenderFault"] for f in failed.values())
    assert failed["bad-body"]["Code"] == "InvalidMessageContents"
    got = received(sqs, url, MaxNumberOfMessages=10)
    assert sorted(m["Body"] for m in got) == ["one", "three"]
    handles = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[*handles, {"Id": "junk", "ReceiptHandle": "nope"}])
    assert sorted(s["Id"] for s in deleted["Successful"]) == ["d0", "d1"]
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("junk", "ReceiptHandleIsInvalid")]


def test_change_visibility_batch(sqs):
    url = sqs.create_queue(QueueName="vis-batch")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(3)])
    got = received(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=30)
    assert len(got) == 3
    answer = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "a", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 0},
        {"Id": "b", "ReceiptHandle": got[1]["ReceiptHandle"], "VisibilityTimeout": 0},
        {"Id": "c", "ReceiptHandle": "bad", "VisibilityTimeout": 0},
    ])
    assert sorted(s["Id"] for s in answer["Successful"]) == ["a", "b"] and answer["Failed"][0]["Id"] == "c"
    assert sorted(m["Body"] for m in received(sqs, url, MaxNumberOfMessages=10)) == sorted(
        [got[0]["Body"], got[1]["Body"]])


@pytest.mark.parametrize("entries, expected", [
    ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
    ([{"Id": str(i), "MessageBody": "x"} for i in range(11)], "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
    ([{"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}],
     "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
    ([{"Id": "bad id!", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ([{"Id": str(i), "MessageBody": "x" * 220_000} for i in range(5)], "AWS.SimpleQueueService.BatchRequestTooLong"),
    # one entry too long alone makes the batch too long: refused whole, as SQS does (not a failed entry)
    ([{"Id": "one", "MessageBody": "x" * 1_048_577}], "AWS.SimpleQueueService.BatchRequestTooLong"),
])
def test_batch_request_errors(sqs, entries, expected):
    url = sqs.create_queue(QueueName="batch-errors")["QueueUrl"]
    assert code(error_of(sqs.send_message_batch, QueueUrl=url, Entries=entries)) == expected


def test_a_batch_entry_over_the_queues_message_size_fails_alone(sqs):
    url = sqs.create_queue(QueueName="small-batch", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "fits", "MessageBody": "x" * 1024},
                                                          {"Id": "long", "MessageBody": "x" * 1025}])
    assert [e["Id"] for e in sent["Successful"]] == ["fits"]
    assert [(e["Id"], e["Code"], e["SenderFault"]) for e in sent["Failed"]] == [("long", "InvalidParameterValue", True)]


def test_sizes_attribute_counts_and_contents(sqs):
    url = sqs.create_queue(QueueName="limits", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x" * 1024)
    assert code(error_of(sqs.send_message, QueueUrl=url, MessageBody="x" * 1025)) == "InvalidParameterValue"
    big = sqs.create_queue(QueueName="limits-big")["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=big, AttributeNames=["MaximumMessageSize"])["Attributes"] == {
        "MaximumMessageSize": "1048576"}  # SQS's default and most since August 2025 (it was 262144)
    sqs.send_message(QueueUrl=big, MessageBody="y" * 600_000)  # within the pro plan's 1 MiB as stored
    (m,) = received(sqs, big)
    assert len(m["Body"]) == 600_000
    assert code(error_of(sqs.send_message, QueueUrl=big, MessageBody="y" * 1_048_577)) == "InvalidParameterValue"
    assert code(error_of(sqs.set_queue_attributes, QueueUrl=big, Attributes={"MaximumMessageSize": "1048577"})) == \
        "InvalidAttributeValue"
    eleven = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}
    assert code(error_of(sqs.send_message, QueueUrl=big, MessageBody="x", MessageAttributes=eleven)) == \
        "InvalidParameterValue"
    for attrs in ({"n": {"DataType": "Number", "StringValue": "abc"}},
                  {"t": {"DataType": "Text", "StringValue": "v"}},
                  {".dot": {"DataType": "String", "StringValue": "v"}},
                  {"s": {"DataType": "String", "BinaryValue": b"v"}},
                  {"amazon.x": {"DataType": "String", "StringValue": "v"}}):
        assert code(error_of(sqs.send_message, QueueUrl=big, MessageBody="x", MessageAttributes=attrs)) == \
            "InvalidParameterValue", attrs
    assert code(error_of(sqs.send_message, QueueUrl=big, MessageBody="bad \ufffe")) == "InvalidMessageContents"
    assert code(error_of(sqs.send_message, QueueUrl=big, MessageBody="nul \x00")) == "InvalidMessageContents"
    assert code(error_of(sqs.send_message, QueueUrl=big, MessageBody="")) in ("InvalidParameterValue",
                                                                                  "MissingParameter")
    assert code(error_of(sqs.receive_message, QueueUrl=big, MaxNumberOfMessages=11)) == "InvalidParameterValue"
    assert code(error_of(sqs.receive_message, QueueUrl=big, VisibilityTimeout=43_201)) == "InvalidParameterValue"


def test_many_concurrent_consumers_get_every_message_once(sqs):
    url = sqs.create_queue(QueueName="crowd")["QueueUrl"]
    total = 200
    for start in range(0, total, 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)}
                                                      for i in range(start, start + 10)])
    seen: list[str] = []
    lock = threading.Lock()

    def consume():
        while True:
            got = received(sqs, url, MaxNumberOfMessages=10, VisibilityTimeout=60)
            if not got:
                return
            with lock:
                seen.extend(m["Body"] for m in got)
            sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                            for i, m in enumerate(got)])

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(seen, key=int) == [str(i) for i in range(total)]


def test_the_queues_api_reads_what_sqs_sent(sqs, gateway, tenant):
    url = sqs.create_queue(QueueName="crossed")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="plain text", MessageAttributes={"k": {"DataType": "String",
                                                                                    "StringValue": "v"}})
    with client(gateway.url, tenant.key) as api:
        (m,) = api.post("/api/v1/queues/crossed/read", json={"qty": 1}).json()["messages"]
    assert m["message"] == "plain text" and m["headers"]["sqs"]["a"]["k"]["StringValue"] == "v"


@pytest.mark.parametrize("stored", [
    "text", 5, [1], {"s": 5, "t": ["x"], "g": {}}, {"a": "junk"}, {"a": {"k": "junk"}},
    {"a": {"k": {"DataType": "Binary", "BinaryValue": "!!not base64"}}},
    {"a": {"k": {"DataType": 7, "StringValue": "v"}}}, {"a": {"k": {"DataType": "String", "StringValue": 3}}},
])
def test_headers_the_queues_api_wrote_under_sqs_are_read_only_in_sqs_shape(sqs, gateway, tenant, stored):
    """A queues API sender may write anything under `sqs` in a message's headers: a receive over SQS
    answers the message, leaving out what is not of the shape a send through SQS keeps."""
    url = sqs.create_queue(QueueName="foreign")["QueueUrl"]
    with client(gateway.url, tenant.key) as api:
        sent = api.post("/api/v1/queues/foreign/send", json={"message": {"x": 1}, "headers": {"sqs": stored}})
        assert sent.status_code == 201, sent.text
    (m,) = sqs.receive_message(QueueUrl=url, AttributeNames=["All"], MessageAttributeNames=["All"])["Messages"]
    assert m["Body"] == '{"x":1}'
    assert "MessageAttributes" not in m
    assert m["Attributes"]["SenderId"] == sqs._request_signer._credentials.access_key  # none kept: the caller's
