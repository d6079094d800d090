"""The redrive through boto3 over HTTP: RedrivePolicy's maxReceiveCount onto a dead-letter queue,
RedriveAllowPolicy, ListDeadLetterSourceQueues, and StartMessageMoveTask/ListMessageMoveTasks moving
dead letters back to their source."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from functools import partial

from sqs_clients import code, error_of

from support.interleaved import each_at_once


def arn(sqs, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def policy(dlq_arn: str, count: int) -> str:
    return json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": count})


def test_messages_received_max_receive_count_times_move_to_the_dead_letter_queue(sqs):
    dlq = sqs.create_queue(QueueName="dead")["QueueUrl"]
    src = sqs.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy(arn(sqs, dlq), 2)})["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(got["RedrivePolicy"]) == {"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 2}
    sqs.send_message(QueueUrl=src, MessageBody="poison", MessageAttributes={"k": {"DataType": "String",
                                                                               "StringValue": "v"}})
    for _ in range(2):
        (m,) = sqs.receive_message(QueueUrl=src, VisibilityTimeout=0, AttributeNames=["All"])["Messages"]
        assert m["Body"] == "poison"
    time.sleep(0.05)
    assert "Messages" not in sqs.receive_message(QueueUrl=src)  # the third receive dead-letters it
    (dead,) = sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"], AttributeNames=["All"])["Messages"]
    assert dead["Body"] == "poison" and dead["MessageAttributes"]["k"]["StringValue"] == "v"
    # SQS keeps a dead letter's receive count (two, and this receive) and says where it came from
    assert dead["Attributes"]["ApproximateReceiveCount"] == "3"
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == arn(sqs, src)
    # a standard queue's dead letter keeps its message id and when it was sent (its retention runs on)
    assert dead["MessageId"] == m["MessageId"]
    assert dead["Attributes"]["SentTimestamp"] == m["Attributes"]["SentTimestamp"]
    assert dead["Attributes"]["ApproximateFirstReceiveTimestamp"] == m["Attributes"]["ApproximateFirstReceiveTimestamp"]
    time.sleep(0.05)
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]
    # the move task sends dead letters back to the queue they came from
    sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0)
    handle = sqs.start_message_move_task(SourceArn=arn(sqs, dlq))["TaskHandle"]
    assert handle
    (task,) = sqs.list_message_move_tasks(SourceArn=arn(sqs, dlq))["Results"]
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 1
    (back,) = sqs.receive_message(QueueUrl=src, AttributeNames=["All"])["Messages"]
    assert back["Body"] == "poison" and back["Attributes"]["ApproximateReceiveCount"] == "1"
    assert "DeadLetterQueueSourceArn" not in back["Attributes"]
    # redriven, it is a new message: a new id, sent now (its retention starts again), as SQS has it
    assert back["MessageId"] != dead["MessageId"]
    assert int(back["Attributes"]["SentTimestamp"]) > int(dead["Attributes"]["SentTimestamp"])
    # clearing the policy
    sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": ""})
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])
    assert "queueUrls" not in sqs.list_dead_letter_source_queues(QueueUrl=dlq)  # left out when empty, as SQS does


def test_a_move_task_to_a_named_destination(sqs):
    dlq = sqs.create_queue(QueueName="dead2")["QueueUrl"]
    sqs.create_queue(QueueName="src2", Attributes={"RedrivePolicy": policy(arn(sqs, dlq), 1)})
    other = sqs.create_queue(QueueName="elsewhere")["QueueUrl"]
    sqs.send_message(QueueUrl=dlq, MessageBody="parked")
    sqs.start_message_move_task(SourceArn=arn(sqs, dlq), DestinationArn=arn(sqs, other),
                                MaxNumberOfMessagesPerSecond=10)
    assert sqs.receive_message(QueueUrl=other)["Messages"][0]["Body"] == "parked"
    (task,) = sqs.list_message_move_tasks(SourceArn=arn(sqs, dlq))["Results"]
    assert task["DestinationArn"] == arn(sqs, other) and task["MaxNumberOfMessagesPerSecond"] == 10
    plain = sqs.create_queue(QueueName="not-a-dlq")["QueueUrl"]
    assert code(error_of(sqs.start_message_move_task, SourceArn=arn(sqs, plain))) == "InvalidParameterValue"


def test_redrive_policies_are_checked(sqs):
    dlq = sqs.create_queue(QueueName="guarded", Attributes={
        "RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})})["QueueUrl"]
    e = error_of(sqs.create_queue, QueueName="denied", Attributes={"RedrivePolicy": policy(arn(sqs, dlq), 3)})
    assert code(e) == "InvalidParameterValue"
    allowed = sqs.create_queue(QueueName="allowed")["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": json.dumps(
        {"redrivePermission": "byQueue", "sourceQueueArns": [arn(sqs, allowed)]})})
    sqs.set_queue_attributes(QueueUrl=allowed, Attributes={"RedrivePolicy": policy(arn(sqs, dlq), 3)})
    for bad in (json.dumps({"deadLetterTargetArn": arn(sqs, dlq)}), policy(arn(sqs, dlq), 0),
                policy("arn:aws:sqs:us-east-1:000000000000:x", 2), "[1]"):
        assert code(error_of(sqs.set_queue_attributes, QueueUrl=allowed, Attributes={"RedrivePolicy": bad})) in (
            "InvalidAttributeValue", "InvalidParameterValue", "AWS.SimpleQueueService.NonExistentQueue")
    missing = json.dumps({"deadLetterTargetArn": arn(sqs, dlq).replace("guarded", "absent"), "maxReceiveCount": 2})
    assert code(error_of(sqs.set_queue_attributes, QueueUrl=allowed, Attributes={"RedrivePolicy": missing})) == \
        "InvalidParameterValue"
    fifo_dlq = sqs.create_queue(QueueName="dl.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    assert code(error_of(sqs.set_queue_attributes, QueueUrl=allowed, Attributes={
        "RedrivePolicy": policy(arn(sqs, fifo_dlq), 2)})) == "InvalidParameterValue"
    e = error_of(sqs.delete_queue, QueueUrl=dlq)  # Postbox keeps a dead-letter queue while a queue uses it
    assert code(e) == "InvalidParameterValue"


def test_redrive_policies_set_at_once_end_as_one_after_another(sqs):
    """a onto b, b onto c and c onto a at once: one after another, the first lands and each other is
    refused (its target has a dead-letter queue, or it is one), so exactly one lands, never a chain
    or a loop of dead-letter queues."""
    def redrive(source: str, target_arn: str) -> str:
        sqs.set_queue_attributes(QueueUrl=source, Attributes={"RedrivePolicy": policy(target_arn, 2)})
        return "set"

    answers: Counter = Counter()
    for _ in range(8):
        a, b, c = (sqs.create_queue(QueueName=f"{x}-{uuid.uuid4().hex[:6]}")["QueueUrl"] for x in "abc")
        round_ = [x if isinstance(x, str) else code(x) for x in each_at_once(
            [partial(redrive, a, arn(sqs, b)), partial(redrive, b, arn(sqs, c)), partial(redrive, c, arn(sqs, a))])]
        answers.update(round_)
        policies = [sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["RedrivePolicy"]).get("Attributes")
                    for q in (a, b, c)]
        assert sum(p is not None for p in policies) == 1, (round_, policies)
    assert answers == Counter({"set": 8, "InvalidParameterValue": 16}), answers


def test_a_fifo_queue_dead_letters_onto_a_fifo_queue(sqs):
    dlq = sqs.create_queue(QueueName="dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    src = sqs.create_queue(QueueName="src.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true", "RedrivePolicy": policy(arn(sqs, dlq), 1),
    })["QueueUrl"]
    sqs.send_message(QueueUrl=src, MessageBody="first", MessageGroupId="g")
    sqs.send_message(QueueUrl=src, MessageBody="second", MessageGroupId="g")
    (m,) = sqs.receive_message(QueueUrl=src, VisibilityTimeout=0, AttributeNames=["All"])["Messages"]
    assert m["Body"] == "first"
    time.sleep(0.05)
    got = sqs.receive_message(QueueUrl=src, MaxNumberOfMessages=10)["Messages"]
    assert [x["Body"] for x in got] == ["second"]  # "first" went to the dead-letter queue
    (dead,) = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"])["Messages"]
    assert dead["Body"] == "first" and dead["Attributes"]["MessageGroupId"] == "g"
    # as SQS moves a FIFO queue's dead letter: sent anew, deduplicated by its own message id
    assert dead["MessageId"] == m["MessageId"]
    assert m["Attributes"]["MessageDeduplicationId"] != m["MessageId"]
    assert dead["Attributes"]["MessageDeduplicationId"] == m["MessageId"]
    assert int(dead["Attributes"]["SentTimestamp"]) > int(m["Attributes"]["SentTimestamp"])


def test_sqls_message_ids_are_the_ones_answered(database_url):
    from postbox import db
    from postbox.sqs.messages import message_id

    ids = [1, 255, 123_456_789, 2**62 + 7, 2**63 - 1]
    with db.connection() as conn:
        got = conn.execute("SELECT array_agg(sqs_message_id(i) ORDER BY n) FROM unnest(%s::bigint[]) WITH ORDINALITY"
                           " u(i, n)", (ids,)).fetchone()[0]
    assert got == [message_id(i) for i in ids]
