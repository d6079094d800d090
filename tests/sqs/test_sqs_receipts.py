"""Receipt handles cannot be forged: a caller deletes or hides only a message it received, with a
handle of that receive of that queue. An edited, made-up, other-key or other-queue handle is
`ReceiptHandleIsInvalid` with SQS's message, in both protocols; a genuine handle keeps working as
before (DeleteMessage takes any of the message's; ChangeMessageVisibility with a stale one answers
that it expired), and across a rotation of the key ring."""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from sqs_clients import code, error_of, query_sqs_client, write_query_model

from postbox import db
from postbox.partitioned import payloads
from postbox.sqs import identity, receipts


@pytest.fixture(scope="session")
def query_data(tmp_path_factory):
    return write_query_model(tmp_path_factory.mktemp("botocore-data"))


def msg_id(message: dict) -> int:
    """The engine's id of a message, from its MessageId (which is not a secret)."""
    return int(message["MessageId"].replace("-", "")[4:], 16)


def queue_id(url: str) -> int:
    """The engine's id of the queue a URL names (the URL's account is its tenant's)."""
    account, name = url.rsplit("/", 2)[1:]
    with db.transaction() as conn:
        rows = conn.execute("SELECT id, tenant_id::text FROM queues WHERE name = %s", (name,)).fetchall()
    (found,) = [i for i, tenant_id in rows if identity.account_id(tenant_id) == account]
    return found


def invalid(error, handle: str) -> None:
    assert code(error) == "ReceiptHandleIsInvalid"
    assert error.response["Error"]["Message"] == f'The input receipt handle "{handle}" is not a valid receipt handle.'


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def forgeries(genuine: str, queue: int, target: int, read_ct: int) -> list[str]:
    """Handles a caller holding `genuine` could make for message `target`: the readable form
    (queue:message:receive), the genuine handle with its ids edited, one sealed with a key the
    server does not hold, and the genuine one with a byte changed."""
    raw = base64.urlsafe_b64decode(genuine + "=" * (-len(genuine) % 4))
    end = 2 + raw[1] if raw[:1] == receipts.VERSION else 0
    edited = raw[:end] + target.to_bytes(8, "big") + raw[end + 8:]
    other_key = secrets.token_bytes(32)
    head = raw[:end] or receipts.VERSION + b"\x06legacy"
    ids = target.to_bytes(8, "big") + read_ct.to_bytes(4, "big")
    made_up = head + ids + receipts._tag(other_key, head, queue, ids)
    flipped = raw[:-1] + bytes([raw[-1] ^ 1])
    return [b64(f"{queue}:{target}:{read_ct}".encode()), b64(edited), b64(made_up), b64(flipped)]


def test_a_handle_edited_to_name_a_message_not_received_is_refused(sqs):
    url = sqs.create_queue(QueueName="forge")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="received")
    (mine,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    sqs.send_message(QueueUrl=url, MessageBody="never received")
    with db.transaction() as conn:
        (target,) = conn.execute("SELECT max(msg_id) FROM queue_messages WHERE queue_id = %s",
                                 (queue_id(url),)).fetchone()
    assert target != msg_id(mine)
    for forged in forgeries(mine["ReceiptHandle"], queue_id(url), target, 1):
        invalid(error_of(sqs.delete_message, QueueUrl=url, ReceiptHandle=forged), forged)
        invalid(error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=forged, VisibilityTimeout=600),
                forged)
        batch = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "f", "ReceiptHandle": forged}])
        assert [(f["Id"], f["Code"]) for f in batch["Failed"]] == [("f", "ReceiptHandleIsInvalid")]
        batch = sqs.change_message_visibility_batch(
            QueueUrl=url, Entries=[{"Id": "f", "ReceiptHandle": forged, "VisibilityTimeout": 600}])
        assert [(f["Id"], f["Code"]) for f in batch["Failed"]] == [("f", "ReceiptHandleIsInvalid")]
    (other,) = sqs.receive_message(QueueUrl=url)["Messages"]  # untouched: visible, and still there
    assert other["Body"] == "never received"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=mine["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=other["ReceiptHandle"])


def test_a_forged_handle_is_refused_in_the_query_protocol(gateway, sqs, mint, query_data):
    qsqs = query_sqs_client(gateway.url, mint("manage"), query_data)
    url = sqs.create_queue(QueueName="forge-query")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="mine")
    (mine,) = qsqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    target = msg_id(sqs.send_message(QueueUrl=url, MessageBody="not mine"))
    for forged in forgeries(mine["ReceiptHandle"], queue_id(url), target, 1):
        error = error_of(qsqs.delete_message, QueueUrl=url, ReceiptHandle=forged)
        invalid(error, forged)
        assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 404  # as SQS answers a handle it never issued
    qsqs.delete_message(QueueUrl=url, ReceiptHandle=mine["ReceiptHandle"])
    assert [m["Body"] for m in qsqs.receive_message(QueueUrl=url)["Messages"]] == ["not mine"]


def test_a_handle_of_another_receive_or_queue(sqs):
    url = sqs.create_queue(QueueName="receives")["QueueUrl"]
    other = sqs.create_queue(QueueName="receives-other")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="twice")
    (first,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    (second,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    assert first["ReceiptHandle"] != second["ReceiptHandle"]
    invalid(error_of(sqs.delete_message, QueueUrl=other, ReceiptHandle=second["ReceiptHandle"]),
            second["ReceiptHandle"])
    edited_count = forgeries(second["ReceiptHandle"], queue_id(url), msg_id(second), 2)
    raw = base64.urlsafe_b64decode(second["ReceiptHandle"] + "=" * (-len(second["ReceiptHandle"]) % 4))
    recounted = b64(raw[:-20] + (7).to_bytes(4, "big") + raw[-16:])  # the receive count edited
    for forged in (recounted, edited_count[2]):
        invalid(error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=forged, VisibilityTimeout=5),
                forged)
    stale = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                     VisibilityTimeout=5)
    assert code(stale) == "InvalidParameterValue" and "The receipt handle has expired" in str(stale)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=60)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])  # any genuine handle deletes
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_handles_are_opaque_and_of_a_reasonable_length(sqs):
    url = sqs.create_queue(QueueName="opaque")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    (m,) = sqs.receive_message(QueueUrl=url)["Messages"]
    handle = m["ReceiptHandle"]
    assert 40 <= len(handle) <= 200 and set(handle) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                          "0123456789-_")
    assert f"{queue_id(url)}:" not in base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode("latin-1")


def test_a_handle_outlives_a_rotation_of_the_key_ring(sqs, monkeypatch):
    """Sealed under one current key, opened after a rotation made another current (the old kept)."""
    ring = {"current": "legacy", "keys": {"legacy": payloads.dev_key_b64()}}
    monkeypatch.setenv("POSTBOX_ENCRYPTION_KEYS", json.dumps(ring))
    payloads.reset()
    try:
        url = sqs.create_queue(QueueName="rotated")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="m")
        (m,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
        monkeypatch.setenv("POSTBOX_ENCRYPTION_KEYS", json.dumps(payloads.rotated(ring)))
        payloads.reset()
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        (again,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
        assert again["ReceiptHandle"] != m["ReceiptHandle"]  # sealed with the new current key
        sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    finally:
        monkeypatch.undo()
        payloads.reset()
