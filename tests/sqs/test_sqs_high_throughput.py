"""High throughput FIFO queues (DeduplicationScope=messageGroup, FifoThroughputLimit=perMessageGroupId),
through boto3 (JSON) and botocore speaking Query: a deduplication id counts within its message group,
and perMessageGroupId is allowed only with messageGroup deduplication, as the SQS API Reference says."""

from __future__ import annotations

from sqs_clients import code, error_of

HIGH = {"FifoQueue": "true", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}


def _bodies(client, url: str) -> list[str]:
    got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    return sorted(m["Body"] for m in got.get("Messages", []))


def test_a_deduplication_id_counts_within_its_message_group(any_sqs):
    url = any_sqs.create_queue(QueueName="fast.fifo", Attributes=HIGH)["QueueUrl"]
    first = any_sqs.send_message(QueueUrl=url, MessageBody="a1", MessageGroupId="a", MessageDeduplicationId="d")
    again = any_sqs.send_message(QueueUrl=url, MessageBody="a2", MessageGroupId="a", MessageDeduplicationId="d")
    other = any_sqs.send_message(QueueUrl=url, MessageBody="b1", MessageGroupId="b", MessageDeduplicationId="d")
    assert again["MessageId"] == first["MessageId"] and other["MessageId"] != first["MessageId"]
    batch = any_sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "1", "MessageBody": "c1", "MessageGroupId": "c", "MessageDeduplicationId": "d"},
        {"Id": "2", "MessageBody": "b2", "MessageGroupId": "b", "MessageDeduplicationId": "d"},
    ])
    assert not batch.get("Failed") and batch["Successful"][1]["MessageId"] == other["MessageId"]
    assert _bodies(any_sqs, url) == ["a1", "b1", "c1"]
    # queue scope (the default) still spans the groups
    plain = any_sqs.create_queue(QueueName="plain.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    any_sqs.send_message(QueueUrl=plain, MessageBody="a", MessageGroupId="a", MessageDeduplicationId="d")
    any_sqs.send_message(QueueUrl=plain, MessageBody="b", MessageGroupId="b", MessageDeduplicationId="d")
    assert _bodies(any_sqs, plain) == ["a"]


def test_content_based_deduplication_within_a_group(any_sqs):
    url = any_sqs.create_queue(QueueName="fast-content.fifo",
                              Attributes={**HIGH, "ContentBasedDeduplication": "true"})["QueueUrl"]
    for group in ("a", "b", "a"):
        any_sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId=group)
    assert _bodies(any_sqs, url) == ["same", "same"]


def test_per_message_group_id_needs_message_group_deduplication(any_sqs):
    e = error_of(any_sqs.create_queue, QueueName="half.fifo",
                 Attributes={"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId"})
    assert code(e) == "InvalidAttributeValue" and "DeduplicationScope is messageGroup" in e.response["Error"]["Message"]
    e = error_of(any_sqs.create_queue, QueueName="half.fifo", Attributes={
        "FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId", "DeduplicationScope": "queue"})
    assert code(e) == "InvalidAttributeValue"
    url = any_sqs.create_queue(QueueName="half.fifo", Attributes=HIGH)["QueueUrl"]
    e = error_of(any_sqs.set_queue_attributes, QueueUrl=url, Attributes={"DeduplicationScope": "queue"})
    assert code(e) == "InvalidAttributeValue"
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "queue",
                                                          "FifoThroughputLimit": "perQueue"})
    got = any_sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DeduplicationScope", "FifoThroughputLimit"])
    assert got["Attributes"] == {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "messageGroup"})
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoThroughputLimit": "perMessageGroupId"})
