"""What the three move-task actions answer, field by field, over JSON and Query: SQS's TaskHandle
(base64 of {"taskId", "sourceArn"}), ListMessageMoveTasks' entries (newest first, one by default),
CancelMessageMoveTask's count, and the errors SQS gives for a bad handle, an unknown or finished
task, an unknown queue and a second active task."""

from __future__ import annotations

import base64
import json
import uuid

from sqs_clients import code, error_of

from postbox.sqs import moves


def arn(sqs, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def dead_letter_queue(sqs, name: str) -> tuple[str, str]:
    dlq = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.create_queue(QueueName=f"{name}-src", Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": arn(sqs, dlq), "maxReceiveCount": 1})})
    return dlq, arn(sqs, dlq)


def refusal(e) -> tuple[str, int, str]:
    return code(e), e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Message"]


def test_a_tasks_handle_list_entries_and_cancel_are_sqs_answers(speaking):
    sqs = speaking()
    dlq, source = dead_letter_queue(sqs, "parked")
    to = sqs.create_queue(QueueName="elsewhere")["QueueUrl"]
    for i in range(5):
        sqs.send_message(QueueUrl=dlq, MessageBody=f"m{i}")
    done = sqs.start_message_move_task(SourceArn=source, DestinationArn=arn(sqs, to))["TaskHandle"]
    doc = base64.b64decode(done)
    assert list(json.loads(doc)) == ["taskId", "sourceArn"] and json.loads(doc)["sourceArn"] == source
    assert doc == json.dumps(json.loads(doc), separators=(",", ":")).encode()  # compact, as SQS writes it
    uuid.UUID(json.loads(doc)["taskId"])
    (completed,) = sqs.list_message_move_tasks(SourceArn=source)["Results"]  # one, the latest, by default
    assert completed["Status"] == "COMPLETED" and "TaskHandle" not in completed
    assert set(completed) == {"Status", "SourceArn", "DestinationArn", "ApproximateNumberOfMessagesMoved",
                              "ApproximateNumberOfMessagesToMove", "StartedTimestamp"}
    assert completed["ApproximateNumberOfMessagesMoved"] == completed["ApproximateNumberOfMessagesToMove"] == 5
    assert refusal(error_of(sqs.cancel_message_move_task, TaskHandle=done)) == (
        "ResourceNotFoundException", 404, "Task does not exist.")  # finished: no longer running

    for i in range(5):
        sqs.send_message(QueueUrl=dlq, MessageBody=f"n{i}")
    running = sqs.start_message_move_task(SourceArn=source, DestinationArn=arn(sqs, to),
                                          MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    assert running != done and json.loads(base64.b64decode(running))["sourceArn"] == source
    latest, earlier = sqs.list_message_move_tasks(SourceArn=source, MaxResults=10)["Results"]
    assert latest["Status"] == "RUNNING" and latest["TaskHandle"] == running and earlier["Status"] == "COMPLETED"
    assert latest["MaxNumberOfMessagesPerSecond"] == 1 and "FailureReason" not in latest
    assert latest["ApproximateNumberOfMessagesMoved"] == 1 and latest["ApproximateNumberOfMessagesToMove"] == 5
    assert refusal(error_of(sqs.start_message_move_task, SourceArn=source, DestinationArn=arn(sqs, to))) == (
        "InvalidParameterValue", 400,
        "There is already a task running. Only one active task is allowed for a source queue arn at a given time.")
    answer = sqs.cancel_message_move_task(TaskHandle=running)
    assert answer["ApproximateNumberOfMessagesMoved"] == 1 and set(answer) == {
        "ApproximateNumberOfMessagesMoved", "ResponseMetadata"}
    (cancelled,) = sqs.list_message_move_tasks(SourceArn=source)["Results"]
    assert cancelled["Status"] == "CANCELLED" and "TaskHandle" not in cancelled


def test_bad_handles_and_unknown_tasks_and_queues_are_refused_as_sqs_refuses_them(speaking):
    sqs = speaking()
    dlq, source = dead_letter_queue(sqs, "parked")
    for bad in ("not-a-handle", str(uuid.uuid4()), base64.b64encode(b'{"taskId":"x"}').decode()):
        assert refusal(error_of(sqs.cancel_message_move_task, TaskHandle=bad)) == (
            "InvalidParameterValue", 400, "Value for parameter TaskHandle is invalid.")
    assert refusal(error_of(sqs.cancel_message_move_task, TaskHandle=moves.task_handle(uuid.uuid4(), source))) == (
        "ResourceNotFoundException", 404, "Task does not exist.")
    absent = source.replace("parked", "absent")
    missing = ("ResourceNotFoundException", 404, "The resource that you specified for the SourceArn parameter "
               "doesn't exist.")
    assert refusal(error_of(sqs.cancel_message_move_task, TaskHandle=moves.task_handle(uuid.uuid4(), absent))) == \
        missing
    assert refusal(error_of(sqs.start_message_move_task, SourceArn=absent)) == missing
    assert refusal(error_of(sqs.list_message_move_tasks, SourceArn=absent)) == missing
    assert refusal(error_of(sqs.start_message_move_task, SourceArn=source, DestinationArn=absent)) == (
        "ResourceNotFoundException", 404, "The resource that you specified for the DestinationArn parameter "
        "doesn't exist.")
    plain = sqs.create_queue(QueueName="plain")["QueueUrl"]
    assert refusal(error_of(sqs.start_message_move_task, SourceArn=arn(sqs, plain))) == (
        "InvalidParameterValue", 400, "Source queue must be configured as a Dead Letter Queue.")
