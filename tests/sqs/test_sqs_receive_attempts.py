"""ReceiveRequestAttemptId through boto3: on a FIFO queue a retried receive within five minutes is
answered the same messages and receipt handles (and hides them again for its VisibilityTimeout)
while none was deleted, had its visibility changed or was received again; then, or after the five
minutes, the retry is a fresh receive. A standard queue ignores the id, as SQS does."""

from __future__ import annotations

import time

from sqs_clients import code, error_of

from postbox import db
from support.interleaved import answers_at_once


def fifo(sqs, name: str) -> str:
    return sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]


def send(sqs, url: str, group: str, *bodies: str) -> None:
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body)


def receive(sqs, url: str, attempt: str | None = None, **kw) -> list[dict]:
    if attempt is not None:
        kw["ReceiveRequestAttemptId"] = attempt
    return sqs.receive_message(QueueUrl=url, AttributeNames=["All"], **kw).get("Messages", [])


def attempts(tenant, name: str) -> list[list[int]]:
    """The message ids each kept attempt of the tenant's queue `name` holds."""
    with db.transaction() as conn:
        return [r[0] for r in conn.execute(
            "SELECT a.msg_ids FROM sqs_receive_attempts a JOIN queues q ON q.id = a.queue_id"
            " WHERE q.tenant_id = %s AND q.name = %s", (tenant.tenant_id, name)).fetchall()]


def handles(messages: list[dict]) -> list[tuple[str, str, str]]:
    return [(m["Body"], m["MessageId"], m["ReceiptHandle"]) for m in messages]


def test_a_retry_is_answered_the_same_messages_and_handles_and_another_id_other_messages(sqs):
    url = fifo(sqs, "retry.fifo")
    send(sqs, url, "A", "a0", "a1")
    send(sqs, url, "B", "b0", "b1")
    first = receive(sqs, url, "one", MaxNumberOfMessages=2, VisibilityTimeout=30)
    assert [m["Body"] for m in first] == ["a0", "a1"]
    other = receive(sqs, url, "two", MaxNumberOfMessages=10, VisibilityTimeout=30)
    assert [m["Body"] for m in other] == ["b0", "b1"]
    for _ in range(2):
        again = receive(sqs, url, "one", MaxNumberOfMessages=2, VisibilityTimeout=30)
        assert handles(again) == handles(first)
        assert [m["Attributes"]["ApproximateReceiveCount"] for m in again] == ["1", "1"]
        assert handles(receive(sqs, url, "two", MaxNumberOfMessages=10)) == handles(other)
    assert receive(sqs, url, "three", MaxNumberOfMessages=10) == []  # both groups held
    # the answered handles work: deleting b0 and b1 by them leaves group B empty
    sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(other)])
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"][
        "ApproximateNumberOfMessagesNotVisible"] == "2"


def test_a_retry_hides_the_messages_again_for_its_own_visibility_timeout(sqs):
    url = fifo(sqs, "reset.fifo")
    send(sqs, url, "A", "a0")
    first = receive(sqs, url, "one", VisibilityTimeout=600)
    assert handles(receive(sqs, url, "one", VisibilityTimeout=1)) == handles(first)
    assert receive(sqs, url) == []
    time.sleep(1.5)  # the retry's second, not the first receive's ten minutes
    (later,) = receive(sqs, url, VisibilityTimeout=30)
    assert later["Body"] == "a0" and later["Attributes"]["ApproximateReceiveCount"] == "2"


def test_after_a_delete_the_retry_is_a_fresh_receive(sqs):
    url = fifo(sqs, "deleted.fifo")
    send(sqs, url, "A", "a0", "a1", "a2")
    (first,) = receive(sqs, url, "one", VisibilityTimeout=30)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    fresh = receive(sqs, url, "one", VisibilityTimeout=30)
    assert [m["Body"] for m in fresh] == ["a1"]
    assert handles(receive(sqs, url, "one", VisibilityTimeout=30)) == handles(fresh)  # the attempt is a1's now


def test_after_a_visibility_change_or_another_receive_the_retry_is_a_fresh_receive(sqs):
    url = fifo(sqs, "touched.fifo")
    send(sqs, url, "A", "a0")
    send(sqs, url, "B", "b0")
    (a0,) = receive(sqs, url, "one", VisibilityTimeout=30)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=a0["ReceiptHandle"], VisibilityTimeout=0)
    fresh = receive(sqs, url, "one", VisibilityTimeout=30)  # a0 again, as a new receive: a new handle
    assert [m["Body"] for m in fresh] == ["a0"]
    assert fresh[0]["ReceiptHandle"] != a0["ReceiptHandle"]
    assert fresh[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    # visible again at once and received by another request: the retry does not take it back
    (b0,) = receive(sqs, url, "two", VisibilityTimeout=0)
    assert receive(sqs, url, "two", VisibilityTimeout=0)[0]["ReceiptHandle"] == b0["ReceiptHandle"]  # untouched
    (taken,) = receive(sqs, url, VisibilityTimeout=30)
    assert taken["Body"] == "b0" and taken["Attributes"]["ApproximateReceiveCount"] == "2"
    assert receive(sqs, url, "two", VisibilityTimeout=30) == []  # b0 is another receive's; a0 is held


def test_an_attempt_is_spent_after_five_minutes_and_swept(sqs, tenant):
    url = fifo(sqs, "expiry.fifo")
    send(sqs, url, "A", "a0")
    send(sqs, url, "B", "b0")
    assert [m["Body"] for m in receive(sqs, url, "old", VisibilityTimeout=30)] == ["a0"]
    with db.transaction() as conn:
        conn.execute("UPDATE sqs_receive_attempts a SET expires_at = clock_timestamp() - interval '1 second'"
                     " FROM queues q WHERE q.id = a.queue_id AND q.tenant_id = %s AND q.name = 'expiry.fifo'",
                     (tenant.tenant_id,))
    other = receive(sqs, url, "new", MaxNumberOfMessages=10, VisibilityTimeout=30)
    assert [m["Body"] for m in other] == ["b0"]
    assert len(attempts(tenant, "expiry.fifo")) == 1  # the receive swept the expired attempt
    assert receive(sqs, url, "old", MaxNumberOfMessages=10) == []  # a new receive: a0 and b0 are held


def test_a_standard_queue_ignores_the_attempt_id_and_it_is_still_checked(sqs, tenant):
    url = sqs.create_queue(QueueName="plain")["QueueUrl"]
    for body in ("m0", "m1"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    first = receive(sqs, url, "same", VisibilityTimeout=30)
    second = receive(sqs, url, "same", VisibilityTimeout=30)
    assert {m["Body"] for m in first + second} == {"m0", "m1"}
    assert attempts(tenant, "plain") == []
    for bad in ("has space", "x" * 129):
        assert code(error_of(sqs.receive_message, QueueUrl=url, ReceiveRequestAttemptId=bad)) == \
            "InvalidParameterValue"


def test_retries_at_once_of_a_new_attempt_are_all_answered_its_messages(sqs):
    """A client that timed out retries while its first receive still runs: every receive naming the
    attempt, however they overlap, is answered the same messages and handles, and what they leave is
    still there for others. Receives that all found no attempt yet each claimed afresh: the later ones
    got other messages (or none), and the first one's, answered to no one, stayed hidden."""
    for round_ in range(5):
        url = fifo(sqs, f"at-once-{round_}.fifo")
        for i in range(12):
            send(sqs, url, f"g{i}", f"m{i}")
        answers = answers_at_once(lambda url=url: handles(receive(
            sqs, url, "retried", MaxNumberOfMessages=10, VisibilityTimeout=60)), 8)
        assert len(answers[0]) == 10 and answers == [answers[0]] * 8, answers
        rest = receive(sqs, url, MaxNumberOfMessages=10)
        assert sorted(m["Body"] for m in rest) == sorted({f"m{i}" for i in range(12)} - {h[0] for h in answers[0]})
