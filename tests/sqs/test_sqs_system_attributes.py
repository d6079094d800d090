"""Message system attributes as SQS keeps and answers them, over JSON and Query: the X-Amzn-Trace-Id
header a send arrives with becomes each message's AWSTraceHeader (a MessageSystemAttributes one
wins); which list a receive's system attributes come from when it names both; and a dead letter
keeps its receive count, first receive, trace header and attributes and names the queue it came from
(DeadLetterQueueSourceArn), on standard and FIFO queues."""

from __future__ import annotations

import json

import pytest

TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
HEADER_TRACE = "Root=1-3152b799-8954dae64eda91bc9a23a7e8;Parent=7fa8c0f79203be72;Sampled=1"
SYSTEM = {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}


def arn(sqs, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def with_trace_header(sqs):
    """The client's sends carry an X-Amzn-Trace-Id header, as the X-Ray SDK adds one."""

    def add(request, **_):
        request.headers["X-Amzn-Trace-Id"] = HEADER_TRACE

    for action in ("SendMessage", "SendMessageBatch"):
        sqs.meta.events.register(f"before-sign.sqs.{action}", add)
    return sqs


def test_a_sends_trace_header_is_each_messages_aws_trace_header(speaking):
    sqs = with_trace_header(speaking())
    url = sqs.create_queue(QueueName="traced")["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="header")
    assert "MD5OfMessageSystemAttributes" not in sent
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "1", "MessageBody": "batch"}])
    sqs.send_message(QueueUrl=url, MessageBody="own", MessageSystemAttributes=SYSTEM)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["SentTimestamp",
                                                                                    "AWSTraceHeader"])["Messages"]
    traces = {m["Body"]: m["Attributes"]["AWSTraceHeader"] for m in got}
    assert traces == {"header": HEADER_TRACE, "batch": HEADER_TRACE, "own": TRACE}
    assert all(set(m["Attributes"]) == {"SentTimestamp", "AWSTraceHeader"} for m in got)


def test_a_receive_naming_both_lists_is_answered_from_its_protocols_own(speaking):
    sqs = speaking()
    url = sqs.create_queue(QueueName="both", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="msg")
    every = {"ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp", "SentTimestamp", "SenderId"}
    for system, older in ((["All"], ["SenderId"]), (["SenderId"], ["All"])):
        (m,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=system,
                                   AttributeNames=older)["Messages"]
        used = older if speaking.protocol == "query" else system  # AttributeName.N over Query, as SQS answers
        assert set(m["Attributes"]) == (every if used == ["All"] else {"SenderId"}), (system, older)


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_a_dead_letter_keeps_its_receive_count_and_names_its_source(speaking, fifo):
    sqs = speaking()
    suffix = ".fifo" if fifo else ""
    kind = {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if fifo else {}
    dlq = sqs.create_queue(QueueName=f"dead{suffix}", Attributes=kind)["QueueUrl"]
    src = sqs.create_queue(QueueName=f"work{suffix}", Attributes={**kind, "RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})})["QueueUrl"]
    group = {"MessageGroupId": "g"} if fifo else {}
    sqs.send_message(QueueUrl=src, MessageBody="message-1", MessageSystemAttributes=SYSTEM,
                     MessageAttributes={"MyAttribute": {"DataType": "String", "StringValue": "foobar"}}, **group)
    (before,) = sqs.receive_message(QueueUrl=src, VisibilityTimeout=0, AttributeNames=["All"])["Messages"]
    assert before["Attributes"]["ApproximateReceiveCount"] == "1" and "DeadLetterQueueSourceArn" not in before[
        "Attributes"]
    assert "Messages" not in sqs.receive_message(QueueUrl=src, VisibilityTimeout=0)  # moved, not handed out
    (dead,) = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"], MessageAttributeNames=["All"])["Messages"]
    attributes = dead["Attributes"]
    assert dead["MessageId"] == before["MessageId"] and dead["Body"] == "message-1"
    assert attributes["ApproximateReceiveCount"] == "2"  # its receive in the source, and this one
    assert attributes["DeadLetterQueueSourceArn"] == arn(sqs, src)
    assert attributes["AWSTraceHeader"] == TRACE
    assert attributes["ApproximateFirstReceiveTimestamp"] == before["Attributes"]["ApproximateFirstReceiveTimestamp"]
    assert dead["MessageAttributes"] == {"MyAttribute": {"DataType": "String", "StringValue": "foobar"}}
    if fifo:
        assert attributes["MessageGroupId"] == "g" and len(attributes["SequenceNumber"]) == 20
    else:
        assert attributes["SentTimestamp"] == before["Attributes"]["SentTimestamp"]
