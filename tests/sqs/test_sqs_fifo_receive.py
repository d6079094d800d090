"""How a FIFO queue hands out its messages, as SQS does (the answers AWS recorded for these steps):
a receive takes as few message groups as it can, each group's visible run whole and in order before
the next group's; groups back from a visibility timeout come after those that were waiting; a
group's run stops at its first message in flight; a ReceiveRequestAttemptId retry answers the same
batch in the same order; and a receipt handle whose visibility timeout has run out deletes nothing.
Each test runs over JSON (boto3) and Query (older botocore)."""

from __future__ import annotations

import time

import pytest
from sqs_clients import code, error_of


def fifo(sqs, name: str = "jobs.fifo", **attributes: str) -> str:
    return sqs.create_queue(QueueName=name, Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true", **attributes})["QueueUrl"]


def send(sqs, url: str, *bodies: str) -> None:
    """Each body names its group before the dash: `g1-m2` is group g1's."""
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=body.split("-")[0])


def receive(sqs, url: str, qty: int = 10, **kw) -> list[dict]:
    return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=qty, **kw).get("Messages", [])


def bodies(messages: list[dict]) -> list[str]:
    return [m["Body"] for m in messages]


def test_a_receive_takes_one_groups_run_before_the_next(speaking):
    sqs = speaking()
    url = fifo(sqs)
    send(sqs, url, "g1-m1", "g2-m1", "g1-m2", "g1-m3")
    assert bodies(receive(sqs, url, 2, VisibilityTimeout=0)) == ["g1-m1", "g1-m2"]  # one group, not two
    assert bodies(receive(sqs, url, 10, VisibilityTimeout=0)) == ["g2-m1", "g1-m1", "g1-m2", "g1-m3"]
    other = fifo(sqs, "other.fifo")
    send(sqs, other, "g1-m1", "g2-m1", "g1-m2", "g1-m3")
    assert bodies(receive(sqs, other)) == ["g1-m1", "g1-m2", "g1-m3", "g2-m1"]


def test_groups_back_from_a_visibility_timeout_come_after_those_waiting(speaking):
    sqs = speaking()
    url = fifo(sqs, VisibilityTimeout="1")
    send(sqs, url, "g1-m1", "g1-m2", "g1-m3", "g1-m4", "g2-m1", "g3-m1")
    assert bodies(receive(sqs, url, 2)) == ["g1-m1", "g1-m2"]
    assert bodies(receive(sqs, url, 1)) == ["g2-m1"]  # group g1 is in flight, whole
    time.sleep(1.5)
    assert bodies(receive(sqs, url, 10, VisibilityTimeout=0)) == [
        "g3-m1", "g1-m1", "g1-m2", "g1-m3", "g1-m4", "g2-m1"]


def test_groups_received_with_no_visibility_timeout_go_behind(speaking):
    sqs = speaking()
    url = fifo(sqs)
    send(sqs, url, "g1-m1", "g2-m1", "g2-m2", "g3-m1", "g1-m2")
    assert bodies(receive(sqs, url, 3, VisibilityTimeout=0)) == ["g1-m1", "g1-m2", "g2-m1"]
    assert bodies(receive(sqs, url, 10, VisibilityTimeout=0)) == ["g3-m1", "g1-m1", "g1-m2", "g2-m1", "g2-m2"]


def test_a_group_goes_out_up_to_its_first_message_in_flight(speaking):
    sqs = speaking()
    url = fifo(sqs, VisibilityTimeout="30")
    send(sqs, url, "g1-m1", "g1-m2", "g2-m1")
    first = receive(sqs, url, 2)
    assert bodies(first) == ["g1-m1", "g1-m2"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"], VisibilityTimeout=0)
    # g1-m1 is visible again (and went back behind g2), g1-m2 still in flight
    assert bodies(receive(sqs, url, 3)) == ["g2-m1", "g1-m1"]


@pytest.mark.parametrize("extended", [0, 1, 2])
def test_a_message_kept_in_flight_holds_back_the_rest_of_its_group(speaking, extended):
    sqs = speaking()
    url = fifo(sqs, VisibilityTimeout="1")
    send(sqs, url, "g1-foo", "g2-m1", "g1-bar", "g1-baz")
    got = receive(sqs, url, 3)
    assert bodies(got) == ["g1-foo", "g1-bar", "g1-baz"]  # group g1 whole, g2 not needed
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[extended]["ReceiptHandle"], VisibilityTimeout=30)
    time.sleep(1.5)
    assert bodies(receive(sqs, url, 10, VisibilityTimeout=0)) == ["g2-m1", *["g1-foo", "g1-bar"][:extended]]


@pytest.mark.parametrize("deleted", [1, 2])
def test_a_group_serves_its_next_messages_once_those_in_flight_are_deleted(speaking, deleted):
    sqs = speaking()
    url = fifo(sqs)
    send(sqs, url, "g1-m1", "g2-m1", "g1-m2", "g2-m2", "g1-m2", "g1-m3", "g1-m4", "g3-m1")  # the 2nd g1-m2: a duplicate
    got = receive(sqs, url, 2)
    assert bodies(got) == ["g1-m1", "g1-m2"]
    for m in got[:deleted]:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    if deleted == 1:  # g1-m2 still in flight holds the group
        assert bodies(receive(sqs, url, 10)) == ["g2-m1", "g2-m2", "g3-m1"]
    else:
        assert bodies(receive(sqs, url, 10)) == ["g2-m1", "g2-m2", "g1-m3", "g1-m4", "g3-m1"]


def test_a_retried_receive_attempt_answers_the_same_batch_in_the_same_order(speaking):
    sqs = speaking()
    url = fifo(sqs)
    send(sqs, url, "g1-m1", "g2-m1", "g1-m2", "g3-m1")
    first = receive(sqs, url, 3, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=30)
    assert bodies(first) == ["g1-m1", "g1-m2", "g2-m1"]
    again = receive(sqs, url, 3, ReceiveRequestAttemptId="attempt-1", VisibilityTimeout=30)
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in again] == [(m["MessageId"], m["ReceiptHandle"])
                                                                      for m in first]
    assert bodies(receive(sqs, url, 10, ReceiveRequestAttemptId="attempt-2")) == ["g3-m1"]


def test_a_receipt_handle_past_its_visibility_timeout_deletes_nothing(speaking):
    sqs = speaking()
    url = fifo(sqs, VisibilityTimeout="1")
    send(sqs, url, "g1-m1", "g2-m1", "g3-m1")
    (one,) = receive(sqs, url, 1)
    (two,) = receive(sqs, url, 1)
    (kept,) = receive(sqs, url, 1)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=kept["ReceiptHandle"], VisibilityTimeout=30)
    time.sleep(1.5)
    e = error_of(sqs.delete_message, QueueUrl=url, ReceiptHandle=one["ReceiptHandle"])
    assert code(e) == "InvalidParameterValue" and e.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert e.response["Error"]["Message"] == (f"Value {one['ReceiptHandle']} for parameter ReceiptHandle is "
                                              "invalid. Reason: The receipt handle has expired.")
    batch = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "expired", "ReceiptHandle": two["ReceiptHandle"]},
                                                            {"Id": "held", "ReceiptHandle": kept["ReceiptHandle"]}])
    assert [s["Id"] for s in batch["Successful"]] == ["held"]
    (failed,) = batch["Failed"]
    assert failed["Id"] == "expired" and failed["Code"] == "InvalidParameterValue" and failed["SenderFault"]
    # the expired ones are still there, and a fresh receipt deletes them
    again = receive(sqs, url, 10)
    assert bodies(again) == ["g1-m1", "g2-m1"]
    sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                    for i, m in enumerate(again)])
    assert receive(sqs, url, 10, VisibilityTimeout=0) == []
    # a standard queue's receipt deletes its message even after the timeout, as SQS's does
    plain = sqs.create_queue(QueueName="plain", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=plain, MessageBody="x")
    (late,) = receive(sqs, plain, 1)
    time.sleep(1.5)
    sqs.delete_message(QueueUrl=plain, ReceiptHandle=late["ReceiptHandle"])
    assert receive(sqs, plain, 10) == []
