"""MessageRetentionPeriod applied by the queue-retention agent: waiting messages (visible, in flight
or delayed) older than their queue's period are deleted, counted as removed; fresher ones stay; a
queue made through the queues API keeps its waiting messages unless SetQueueAttributes gave it a
period (tagging it or setting another attribute does not)."""

from __future__ import annotations

import threading

from functions.agents.queue_retention import handler
from functions.local.lambda_context import LocalContext
from postbox import db
from postbox.queues import service
from postbox.sqs import retention


def _age(tenant, name: str, seconds: int, first: int | None = None) -> None:
    """Make the first `first` waiting messages of the queue (all of them by default) as old as `seconds`."""
    with db.transaction() as conn:
        conn.execute(
            "UPDATE queue_messages m SET enqueued_at = clock_timestamp() - make_interval(secs => %(s)s)"
            " WHERE (m.queue_id, m.msg_id) IN (SELECT w.queue_id, w.msg_id FROM queue_messages w"
            "  JOIN queues q ON q.id = w.queue_id WHERE q.tenant_id = %(t)s AND q.name = %(n)s"
            "  ORDER BY w.msg_id LIMIT %(k)s)",
            {"s": seconds, "t": tenant.tenant_id, "n": name, "k": first},
        )


def _waiting(tenant, name: str) -> tuple[int, int]:
    """(rows, bytes) of the queue's waiting messages, counted from the rows themselves."""
    with db.transaction() as conn:
        return conn.execute(
            "SELECT count(*), coalesce(sum(m.size), 0) FROM queue_messages m JOIN queues q ON q.id = m.queue_id"
            " WHERE q.tenant_id = %s AND q.name = %s", (tenant.tenant_id, name)).fetchone()


def _counted_right(tenant, name: str) -> int:
    """The queue's length, checked against its counters (length and stored bytes)."""
    rows, size = _waiting(tenant, name)
    metrics = service.queue_metrics(tenant.principal, name)
    assert (metrics["queue_length"], metrics["stored_bytes"]) == (rows, size), name
    return rows


def test_waiting_messages_past_their_retention_are_deleted_and_counted(sqs, tenant):
    urls = {
        "std": sqs.create_queue(QueueName="std")["QueueUrl"],  # the default: four days
        "short.fifo": sqs.create_queue(QueueName="short.fifo", Attributes={
            "FifoQueue": "true", "ContentBasedDeduplication": "true", "MessageRetentionPeriod": "60"})["QueueUrl"],
    }
    for name in ("api", "given", "tagged"):
        service.create_queue(tenant.principal, name, {})
        urls[name] = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=urls["given"], Attributes={"MessageRetentionPeriod": "120"})
    sqs.tag_queue(QueueUrl=urls["tagged"], Tags={"team": "x"})
    sqs.set_queue_attributes(QueueUrl=urls["tagged"], Attributes={"VisibilityTimeout": "20", "DelaySeconds": "0"})
    for name, url in urls.items():
        for i in range(5):
            extra = {"MessageGroupId": "g"} if name.endswith(".fifo") else {}
            sqs.send_message(QueueUrl=url, MessageBody=f"{name}-{i}", **extra)
    (held,) = sqs.receive_message(QueueUrl=urls["std"], VisibilityTimeout=600)["Messages"]  # std-0, in flight
    _age(tenant, "std", 4 * 86_400 - 600)  # all five nearly four days old,
    _age(tenant, "std", 4 * 86_400 + 60, first=3)  # the first three (the one in flight too) older
    _age(tenant, "short.fifo", 61, first=3)
    _age(tenant, "given", 121, first=3)
    _age(tenant, "api", 30 * 86_400)
    _age(tenant, "tagged", 30 * 86_400)

    result = handler({}, LocalContext("queue-retention"))

    assert result["expired"] >= 9
    assert {name: _counted_right(tenant, name) for name in urls} == {
        "std": 2, "short.fifo": 2, "given": 2, "api": 5, "tagged": 5}
    got = sqs.get_queue_attributes(QueueUrl=urls["std"], AttributeNames=["All"])["Attributes"]
    assert (got["ApproximateNumberOfMessages"], got["ApproximateNumberOfMessagesNotVisible"]) == ("2", "0")
    assert held["Body"] == "std-0"
    left = sqs.receive_message(QueueUrl=urls["short.fifo"], MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in left] == ["short.fifo-3", "short.fifo-4"]
    handler({}, LocalContext("queue-retention"))  # a second run finds nothing more of these
    assert {name: _counted_right(tenant, name) for name in ("std", "given", "api", "tagged")} == {
        "std": 2, "given": 2, "api": 5, "tagged": 5}


def test_overlapping_sweeps_delete_each_expired_message_once(sqs, tenant):
    sqs.create_queue(QueueName="bulk", Attributes={"MessageRetentionPeriod": "60"})
    for _ in range(10):
        service.send_messages(tenant.principal, "bulk", list(range(100)))
    _age(tenant, "bulk", 120, first=900)
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(retention.sweep(batch=50))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert _counted_right(tenant, "bulk") == 100
    assert len(results) == 2 and sum(results) >= 900


def test_a_sweep_goes_on_past_messages_another_sweep_holds(sqs, tenant):
    """Deterministic: some of the oldest expired messages held by another transaction (an
    overlapping sweep mid-pass): a sweep skips them and still deletes every other expired message,
    rather than taking its short pass for the end; the held ones go in the next sweep."""
    sqs.create_queue(QueueName="held", Attributes={"MessageRetentionPeriod": "60"})
    for _ in range(10):
        service.send_messages(tenant.principal, "held", list(range(100)))
    _age(tenant, "held", 120, first=900)
    with db.transaction() as other:
        other.execute(
            "SELECT m.msg_id FROM queue_messages m JOIN queues q ON q.id = m.queue_id"
            " WHERE q.tenant_id = %s AND q.name = 'held' ORDER BY m.msg_id LIMIT 10 FOR UPDATE OF m",
            (tenant.tenant_id,))
        assert retention.sweep(batch=50) == 890
    assert _counted_right(tenant, "held") == 110
    assert retention.sweep(batch=50) == 10
    assert _counted_right(tenant, "held") == 100
