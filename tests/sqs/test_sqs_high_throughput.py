"""High throughput FIFO queues (DeduplicationScope=messageGroup, FifoThroughputLimit=perMessageGroupId),
through boto3 (JSON) and botocore speaking Query: a deduplication id counts within its message group."""

from __future__ import annotations

import pytest
from sqs_clients import query_sqs_client, sqs_client, write_query_model

HIGH = {"FifoQueue": "true", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}


@pytest.fixture(scope="module")
def query_data(tmp_path_factory):
    return write_query_model(tmp_path_factory.mktemp("botocore-data"))


@pytest.fixture(params=["json", "query"])
def client(request, gateway, mint, query_data):
    """An SQS client of a fresh tenant, speaking JSON 1.0 (boto3) or Query (botocore)."""
    credential = mint("manage")
    if request.param == "json":
        return sqs_client(gateway.url, credential)
    return query_sqs_client(gateway.url, credential, query_data)


def _bodies(client, url: str) -> list[str]:
    got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    return sorted(m["Body"] for m in got.get("Messages", []))


def test_a_deduplication_id_counts_within_its_message_group(client):
    url = client.create_queue(QueueName="fast.fifo", Attributes=HIGH)["QueueUrl"]
    first = client.send_message(QueueUrl=url, MessageBody="a1", MessageGroupId="a", MessageDeduplicationId="d")
    again = client.send_message(QueueUrl=url, MessageBody="a2", MessageGroupId="a", MessageDeduplicationId="d")
    other = client.send_message(QueueUrl=url, MessageBody="b1", MessageGroupId="b", MessageDeduplicationId="d")
    assert again["MessageId"] == first["MessageId"] and other["MessageId"] != first["MessageId"]
    batch = client.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "1", "MessageBody": "c1", "MessageGroupId": "c", "MessageDeduplicationId": "d"},
        {"Id": "2", "MessageBody": "b2", "MessageGroupId": "b", "MessageDeduplicationId": "d"},
    ])
    assert not batch.get("Failed") and batch["Successful"][1]["MessageId"] == other["MessageId"]
    assert _bodies(client, url) == ["a1", "b1", "c1"]


def test_content_based_deduplication_within_a_group(client):
    url = client.create_queue(QueueName="fast-content.fifo",
                              Attributes={**HIGH, "ContentBasedDeduplication": "true"})["QueueUrl"]
    for group in ("a", "b", "a"):
        client.send_message(QueueUrl=url, MessageBody="same", MessageGroupId=group)
    assert _bodies(client, url) == ["same", "same"]


def test_queue_scope_deduplicates_across_groups(client):
    url = client.create_queue(QueueName="plain.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    client.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="a", MessageDeduplicationId="d")
    client.send_message(QueueUrl=url, MessageBody="b", MessageGroupId="b", MessageDeduplicationId="d")
    assert _bodies(client, url) == ["a"]
