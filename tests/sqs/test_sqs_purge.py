"""PurgeQueue as SQS answers it, over JSON and Query: every message goes (visible, in flight and
delayed), a FIFO queue forgets its deduplication ids (the same MessageDeduplicationId sent again is a
new message), and a second purge within 60 seconds is PurgeQueueInProgress."""

from __future__ import annotations

from sqs_clients import code, error_of


def test_a_purge_clears_every_message_and_a_fifo_queues_deduplication(speaking):
    sqs = speaking()
    url = sqs.create_queue(QueueName="purged.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    first = sqs.send_message(QueueUrl=url, MessageBody="message-1", MessageGroupId="g", MessageDeduplicationId="d")
    sqs.send_message(QueueUrl=url, MessageBody="other", MessageGroupId="h", MessageDeduplicationId="o")
    (held,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60, ReceiveRequestAttemptId="a")["Messages"]
    sqs.purge_queue(QueueUrl=url)
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == counts["ApproximateNumberOfMessagesNotVisible"] == "0"
    again = sqs.send_message(QueueUrl=url, MessageBody="message-2", MessageGroupId="g", MessageDeduplicationId="d")
    assert again["MessageId"] != first["MessageId"]  # a new message, not a duplicate of the purged one
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, ReceiveRequestAttemptId="a")["Messages"]
    assert [m["Body"] for m in got] == ["message-2"] and got[0]["ReceiptHandle"] != held["ReceiptHandle"]

    standard = sqs.create_queue(QueueName="purged")["QueueUrl"]
    sqs.send_message(QueueUrl=standard, MessageBody="waiting")
    sqs.send_message(QueueUrl=standard, MessageBody="delayed", DelaySeconds=900)
    sqs.send_message(QueueUrl=standard, MessageBody="in flight")
    sqs.receive_message(QueueUrl=standard, VisibilityTimeout=0)
    sqs.receive_message(QueueUrl=standard, VisibilityTimeout=600)
    sqs.purge_queue(QueueUrl=standard)
    counts = sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["All"])["Attributes"]
    assert [counts[f"ApproximateNumberOfMessages{k}"] for k in ("", "NotVisible", "Delayed")] == ["0", "0", "0"]

    e = error_of(sqs.purge_queue, QueueUrl=standard)
    assert code(e) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert e.response["Error"]["Message"] == "Only one PurgeQueue operation on purged is allowed every 60 seconds."
