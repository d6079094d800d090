"""SQS's message actions on the message engine: send (one or a batch), receive (long polls on the
shared wait), delete and change visibility by receipt handle, each one SQL call (sqs.sql).

A body is kept as a JSON string, so the queues surface and the console read it as the text sent;
SQS's message attributes, group, deduplication id, sender and trace header travel in the message's
headers under `sqs`. A receipt handle names the message and the receive (its read count), sealed
for its queue (`receipts`): a later receive of the same message makes an earlier handle stale for
ChangeMessageVisibility (SQS's "receipt handle has expired"), while DeleteMessage takes any handle of
the message, as SQS does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .. import db, jsoncodec, tenancy, wait_slots, wakeup
from ..errors import LimitExceeded, NotFound, TooLarge
from ..queues import consumers, engine
from ..tenancy import Principal
from . import attributes, digests, errors, identity, receipts
from .queues import SqsQueue, find

MAX_BATCH = 10
MAX_ATTRIBUTES = 10
MAX_WAIT_SECONDS = 20
MAX_VISIBILITY = 43_200
MAX_RECEIVE = 10
META_TTL_S = 5.0  # attribute changes reach sends within this (SQS: up to 60 s)
SYSTEM_NAMES = ("ApproximateReceiveCount", "ApproximateFirstReceiveTimestamp", "SentTimestamp", "SenderId",
                "AWSTraceHeader", "MessageDeduplicationId", "MessageGroupId", "SequenceNumber",
                "SqsManagedSseEnabled", "DeadLetterQueueSourceArn")
_ENTRY_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_DATA_TYPE = re.compile(r"^(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?$")
_GROUP = re.compile(r"^[!-~]{1,128}$")  # SQS: 1-128 printable ASCII characters without spaces
_BAD_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# ---- the queue's settings a send or receive needs, remembered briefly -----------------------

_meta: dict[tuple[str, str, str], tuple[float, SqsQueue]] = {}
_meta_lock = threading.Lock()


def meta(principal: Principal, name: str) -> SqsQueue:
    key = (principal.tenant_id, tenancy.project_id(principal), name)
    hit = _meta.get(key)
    if hit and hit[0] > time.monotonic():
        return hit[1]
    with db.transaction() as conn:
        found = find(conn, principal, name)
    with _meta_lock:
        if len(_meta) > 10_000:
            _meta.clear()
        _meta[key] = (time.monotonic() + META_TTL_S, found)
    return found


def forget(principal: Principal, name: str) -> None:
    _meta.pop((principal.tenant_id, tenancy.project_id(principal), name), None)


# ---- checking what a send names ----------------------------------------------------------------


def _text(value: Any, parameter: str) -> str:
    if not isinstance(value, str):
        raise errors.invalid_parameter(f"Value for parameter {parameter} is invalid: a string is expected.")
    return value


def check_body(body: Any) -> str:
    if body is None or body == "":  # SQS takes an empty body for none
        raise errors.missing_parameter("MessageBody")
    body = _text(body, "MessageBody")
    bad = _BAD_TEXT.search(body)
    if bad:
        raise errors.invalid_character(bad.group())
    return body


def _attribute_name(name: Any, system: bool) -> str:
    if not isinstance(name, str) or not _ATTRIBUTE_NAME.fullmatch(name) or name.startswith(".") or \
            name.endswith(".") or ".." in name:
        raise errors.invalid_parameter(f"Message (user) attribute name '{str(name)[:256]}' is invalid: names are "
                                       "1-256 letters, digits, _ - or ., not starting or ending with . or holding ..")
    if not system and name.lower().startswith(("aws.", "amazon.")):
        raise errors.invalid_parameter(f"Message (user) attribute name '{name}' is reserved (AWS. and Amazon.).")
    return name


def check_attributes(given: Any, *, system: bool = False) -> tuple[dict[str, dict[str, str]], int]:
    """Message attributes in SQS's form (DataType, StringValue or BinaryValue as base64) and the bytes
    they count towards the message's size."""
    if given is None:
        return {}, 0
    if not isinstance(given, dict):
        raise errors.invalid_parameter("MessageAttributes must be a map of names to values.")
    if len(given) > MAX_ATTRIBUTES:
        raise errors.invalid_parameter(f"Number of message attributes [{len(given)}] exceeds the allowed maximum "
                                       f"[{MAX_ATTRIBUTES}].")
    out: dict[str, dict[str, str]] = {}
    size = 0
    for name, value in given.items():
        _attribute_name(name, system)
        if system and name != "AWSTraceHeader":
            raise errors.invalid_parameter(f"Message system attribute name '{name}' is invalid.")
        if not isinstance(value, dict) or set(value) - {"DataType", "StringValue", "BinaryValue",
                                                         "StringListValues", "BinaryListValues"}:
            raise errors.invalid_parameter(f"The message attribute '{name}' is not a map of DataType and a value.")
        kind = value.get("DataType")
        if not isinstance(kind, str) or not _DATA_TYPE.fullmatch(kind) or len(kind) > 256:
            raise errors.invalid_attribute_type(name)
        if value.get("StringListValues") or value.get("BinaryListValues"):
            raise errors.invalid_parameter(f"Message attribute list values in SendMessage operation are not "
                                           f"supported ('{name}').")
        if system and kind != "String":
            raise errors.invalid_parameter("AWSTraceHeader must be of type String.")
        if kind.startswith("Binary"):
            raw = value.get("BinaryValue")
            try:
                blob = base64.b64decode(raw, validate=True) if isinstance(raw, str) else None
            except (binascii.Error, ValueError):
                blob = None
            if raw == "" or blob == b"":
                raise errors.empty_attribute_value(name, kind.split(".")[0])
            if not blob:
                raise errors.invalid_parameter(f"The message attribute '{name}' with type 'Binary' must use field "
                                               "'Binary'.")
            out[name] = {"DataType": kind, "BinaryValue": raw}
            size += len(blob)
        else:
            text = value.get("StringValue")
            if text == "":
                raise errors.empty_attribute_value(name, kind.split(".")[0])
            if not isinstance(text, str) or "BinaryValue" in value:
                raise errors.invalid_parameter(f"The message attribute '{name}' with type '{kind.split('.')[0]}' "
                                               "must use field 'String'.")
            bad = _BAD_TEXT.search(text)
            if bad:  # SQS answers InvalidParameterValue here, not the body's InvalidMessageContents
                raise errors.invalid_attribute_character(name, bad.group())
            if kind.startswith("Number"):
                _check_number(name, text)
            out[name] = {"DataType": kind, "StringValue": text}
            size += len(text.encode("utf-8", "surrogatepass"))
        size += len(name.encode()) + len(kind.encode())
    return out, size


def _check_number(name: str, text: str) -> None:
    try:
        number = Decimal(text)
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite() or len(number.as_tuple().digits) > 38 or \
            not Decimal("-1e128") <= number <= Decimal("1e126"):
        raise errors.invalid_parameter(f"Can't cast the value of message (user) attribute '{name}' to a number.")


@dataclass
class Outgoing:
    body: str
    attributes: dict[str, dict[str, str]]
    system: dict[str, dict[str, str]]
    delay: float
    headers: dict[str, Any]
    size: int
    dedup: str | None


def integer_parameter(value: Any, parameter: str, least: int, most: int) -> int | None:
    """An optional integer parameter within [least, most], or SQS's InvalidParameterValue naming it."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise errors.out_of_range(value, parameter, least, most)
    return value


def fifo_ids_given(queue: SqsQueue, entry: dict[str, Any], *, in_batch: bool = False) -> None:
    """A FIFO message names its group, and its deduplication id unless the queue derives it from the
    body. SQS refuses a whole batch over an entry that does not (not that entry alone), and words the
    missing group as an invalid value there, as a missing parameter in SendMessage."""
    if entry.get("MessageGroupId") is None:
        raise errors.missing_in_batch("MessageGroupId") if in_batch else errors.missing_parameter("MessageGroupId")
    if entry.get("MessageDeduplicationId") is None and queue.setting("ContentBasedDeduplication") != "true":
        raise errors.no_deduplication_id()


def outgoing(queue: SqsQueue, principal: Principal, entry: dict[str, Any], trace: str | None = None) -> Outgoing:
    """One message to send, held to SQS's rules for its queue (FIFO or standard). `trace` is the
    request's X-Amzn-Trace-Id header: every message of the request carries it as its AWSTraceHeader,
    unless the message names its own in MessageSystemAttributes (SQS's rule)."""
    body = check_body(entry.get("MessageBody"))
    attrs, attrs_size = check_attributes(entry.get("MessageAttributes"))
    system, _ = check_attributes(entry.get("MessageSystemAttributes"), system=True)
    size = len(body.encode("utf-8", "surrogatepass")) + attrs_size
    delay = integer_parameter(entry.get("DelaySeconds"), "DelaySeconds", 0, 900)
    group, dedup = entry.get("MessageGroupId"), entry.get("MessageDeduplicationId")
    sqs: dict[str, Any] = {"s": principal.key_id}
    if queue.fifo:
        if delay:  # 0 is taken and changes nothing (SQS's answer): the queue's delay applies
            raise errors.not_for_queue_type(delay, "DelaySeconds")
        fifo_ids_given(queue, entry)
        if dedup is None:
            dedup = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
        for value, parameter in ((group, "MessageGroupId"), (dedup, "MessageDeduplicationId")):
            if not isinstance(value, str) or not _GROUP.fullmatch(value):
                raise errors.fifo_id(value, parameter)
        sqs["g"], sqs["d"] = group, dedup
        # By message group: the group, a space (in neither id) and the id, so no two pairs meet.
        key = f"{group} {dedup}" if queue.setting("DeduplicationScope") == "messageGroup" else dedup
    else:
        if dedup is not None:
            raise errors.not_for_queue_type(dedup, "MessageDeduplicationId")
        key = None
        if group is not None:  # SQS's fair queues: a standard queue keeps the group, and orders nothing by it
            if not isinstance(group, str) or not _GROUP.fullmatch(group):
                raise errors.fifo_id(group, "MessageGroupId")
            sqs["fg"] = group
    if attrs:
        sqs["a"] = attrs
    if system:
        sqs["t"] = system["AWSTraceHeader"]["StringValue"]
    elif trace:
        sqs["t"] = trace
    if delay is None or queue.fifo:
        delay = queue.delay
    return Outgoing(body, attrs, system, float(delay), {"sqs": sqs}, size, key)


def within_size(queue: SqsQueue, m: Outgoing, *, in_batch: bool = False) -> Outgoing:
    """The message, when it fits the queue's MaximumMessageSize (a batch's total is checked first)."""
    limit = queue.max_message_size
    if m.size > limit:
        raise errors.message_too_long(limit, in_batch=in_batch)
    return m


def message_id(msg_id: int) -> str:
    """The message's id as SQS writes one (a UUID's form): 5b0c, then the id in hex; formatted
    directly, in 0.5 us where `uuid.UUID` took 1.3 (ten a batch)."""
    h = f"{(0x5B0C << 112) | msg_id:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def sequence_number(msg_id: int) -> str:
    return f"{msg_id:020d}"


def _send(principal: Principal, queue: SqsQueue, name: str, batch: list[Outgoing]) -> list[tuple[int, bool]]:
    bodies = [db_json_string(m.body) for m in batch]
    headers = [db_json(m.headers) for m in batch]
    sizes = [len(b) + len(h) for b, h in zip(bodies, headers, strict=True)]
    # Arrays go as binary text[] and array literals: psycopg's per-element text dump of a list was
    # most of a send's Python time.
    with db.connection() as conn, db.domain_errors():
        rows = conn.execute(
            "SELECT * FROM sqs_send(%s, %s, %s, %b::text[], %s::int[], %s::float8[], %b::text[]::jsonb[], %b::text[])",
            (principal.tenant_id, tenancy.project_id(principal), name, bodies, engine.int_array(sizes),
             "{" + ",".join(repr(m.delay) for m in batch) + "}", headers,
             [m.dedup for m in batch] if queue.fifo else None),
        ).fetchall()
    if rows and rows[0][1] is not None:
        consumers.start_dispatch(rows[0][1])
    return [(r[0], r[2]) for r in rows]


def db_json_string(text: str) -> str:
    return jsoncodec.dumps(text).decode()


def db_json(value: Any) -> str:
    return jsoncodec.dumps(value).decode()


def _sent(m: Outgoing, msg_id: int, fifo: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"MessageId": message_id(msg_id), "MD5OfMessageBody": digests.body_md5(m.body)}
    if m.attributes:
        out["MD5OfMessageAttributes"] = digests.attributes_md5(m.attributes)
    if m.system:
        out["MD5OfMessageSystemAttributes"] = digests.attributes_md5(m.system)
    if fifo:
        out["SequenceNumber"] = sequence_number(msg_id)
    return out


def send(principal: Principal, name: str, request: dict[str, Any], trace: str | None = None) -> dict[str, Any]:
    tenancy.require(principal, "write")
    queue = meta(principal, name)
    m = within_size(queue, outgoing(queue, principal, request, trace))
    ((msg_id, _),) = _in_sqs_terms(lambda: _send(principal, queue, name, [m]))
    return _sent(m, msg_id, queue.fifo)


def check_entries(entries: Any, kind: str) -> list[dict[str, Any]]:
    """A batch's entries: 1-10 maps with distinct, well-formed ids."""
    if entries is None or entries == []:
        raise errors.empty_batch(kind)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise errors.invalid_parameter("Entries must be a list of entries.")
    if len(entries) > MAX_BATCH:
        raise errors.too_many_entries(len(entries))
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
            raise errors.invalid_entry_id(str(entry_id))
        if entry_id in seen:
            raise errors.ids_not_distinct(entry_id)
        seen.add(entry_id)
    return entries


def _failure(entry_id: str, error: errors.SqsError) -> dict[str, Any]:
    return {"Id": entry_id, "SenderFault": error.fault == "Sender", "Code": error.query_code,
            "Message": error.message}


def send_batch(principal: Principal, name: str, entries: Any, trace: str | None = None) -> dict[str, Any]:
    """Every good entry is sent (one SQL call); each bad one is a failure of its own, as SQS answers.
    A batch longer than SQS allows is refused whole, counting every entry, even one too long alone, and
    so is a FIFO batch with an entry that names no group (or no deduplication id where one is needed)."""
    tenancy.require(principal, "write")
    entries = check_entries(entries, "SendMessageBatchRequestEntry")
    queue = meta(principal, name)
    for entry in entries if queue.fifo else ():
        fifo_ids_given(queue, entry, in_batch=True)
    built: list[tuple[str, Outgoing]] = []
    failed = []
    for entry in entries:
        try:
            if entry.get("MessageBody") == "":
                raise errors.empty_in_batch("MessageBody")
            built.append((entry["Id"], outgoing(queue, principal, entry, trace)))
        except errors.SqsError as error:
            failed.append(_failure(entry["Id"], error))
    total = sum(m.size for _, m in built)
    if total > attributes.NUMBERS["MaximumMessageSize"][1]:
        raise errors.batch_too_long(total, attributes.NUMBERS["MaximumMessageSize"][1])
    good: list[tuple[str, Outgoing]] = []
    for entry_id, m in built:
        try:
            good.append((entry_id, within_size(queue, m, in_batch=True)))
        except errors.SqsError as error:
            failed.append(_failure(entry_id, error))
    done = []
    if good:
        ids = _in_sqs_terms(lambda: _send(principal, queue, name, [m for _, m in good]))
        done = [{"Id": entry_id, **_sent(m, msg_id, queue.fifo)}
                for (entry_id, m), (msg_id, _) in zip(good, ids, strict=True)]
    return {"Successful": done, "Failed": failed}


def _in_sqs_terms(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except NotFound:
        raise errors.no_queue() from None
    except (LimitExceeded, TooLarge) as e:
        raise errors.over_limit(e.message) from None


# ---- receiving ------------------------------------------------------------------------------------


def _names(value: Any, parameter: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.invalid_parameter(f"{parameter} must be a list of names.")
    return value


def _wanted_system(request: dict[str, Any], query: bool) -> set[str]:
    """The system attributes a receive asks for. It may name them in MessageSystemAttributeNames or
    in the older AttributeNames; given both, SQS answers the first over JSON and the second over
    Query (AttributeName.N), and so does this. Each list is checked whole."""
    system = _names(request.get("MessageSystemAttributeNames"), "MessageSystemAttributeNames")
    older = _names(request.get("AttributeNames"), "AttributeNames")
    for name in (*system, *older):
        if name != "All" and name not in SYSTEM_NAMES and name not in attributes.ALL:
            raise errors.unknown_attribute(name)
    asked = set((older or system) if query else (system or older))
    return set(SYSTEM_NAMES) if "All" in asked else asked & set(SYSTEM_NAMES)


def _wanted_attributes(request: dict[str, Any]) -> Callable[[str], bool]:
    """`All`, `.*` and `*` ask for every attribute; `Foo.*` for those whose names start with `Foo`
    (`Foo1`, `Foo.bar`: SQS's prefix stops before the `.*`); other names, for themselves."""
    asked = _names(request.get("MessageAttributeNames"), "MessageAttributeNames")
    if "All" in asked or ".*" in asked or "*" in asked:
        return lambda name: True
    exact = {a for a in asked if not a.endswith(".*")}
    prefixes = tuple(a[:-2] for a in asked if a.endswith(".*"))
    return lambda name: name in exact or (bool(prefixes) and name.startswith(prefixes))


def _stored(headers: Any) -> dict[str, Any]:
    """What a send through SQS kept in the message's headers (`sqs`): sender, trace header, group,
    deduplication id, attributes, and the queue a dead letter came from. Headers are the queues API's
    too, where a sender may write any JSON under `sqs`: a part not of the shape SQS wrote is left out
    rather than answered."""
    sqs = headers.get("sqs") if isinstance(headers, dict) else None
    if not isinstance(sqs, dict):
        return {}
    kept = {k: v for k, v in sqs.items() if k in _STORED_TEXTS and isinstance(v, str)}
    if "a" in sqs:
        attrs = sqs["a"]
        if isinstance(attrs, dict) and len(attrs) <= MAX_ATTRIBUTES and all(map(_stored_value, attrs.values())):
            kept["a"] = attrs
    return kept


_STORED_TEXTS = ("s", "t", "g", "d", "fg", "dq")


def _stored_value(value: Any) -> bool:
    """A message attribute as a send through SQS keeps one (so its digest can be computed)."""
    if not isinstance(value, dict) or not isinstance(value.get("DataType"), str):
        return False
    if "BinaryValue" not in value:
        return isinstance(value.get("StringValue"), str)
    try:
        base64.b64decode(value["BinaryValue"], validate=True)
    except (binascii.Error, ValueError, TypeError):
        return False
    return True


def _received(queue: SqsQueue, principal: Principal, row: dict[str, Any], system: set[str],
              wanted: Callable[[str], bool]) -> dict[str, Any]:
    body = row["body"] if isinstance(row["body"], str) else db_json(row["body"])
    sqs = _stored(row.get("h"))
    out: dict[str, Any] = {"MessageId": message_id(row["id"]),
                           "ReceiptHandle": receipts.seal(queue.id, row["id"], row["n"]),
                           "MD5OfBody": digests.body_md5(body), "Body": body}
    if system:  # most receives ask for none
        values = {
            "ApproximateReceiveCount": str(row["n"]),
            "ApproximateFirstReceiveTimestamp": str(int(row["first"] * 1000)),
            "SentTimestamp": str(int(row["sent"] * 1000)),
            "SenderId": sqs.get("s") or principal.key_id,
            "AWSTraceHeader": sqs.get("t"),
            "MessageDeduplicationId": sqs.get("d") if queue.fifo else None,
            "MessageGroupId": sqs.get("g") if queue.fifo else sqs.get("fg"),
            "SequenceNumber": sequence_number(row["id"]) if queue.fifo else None,
            "DeadLetterQueueSourceArn": identity.queue_arn(principal.tenant_id, sqs["dq"]) if "dq" in sqs else None,
        }
        picked = {k: v for k, v in values.items() if k in system and v is not None}
        if picked:
            out["Attributes"] = picked
    attrs = {k: v for k, v in sqs["a"].items() if wanted(k)} if "a" in sqs else None
    if attrs:
        out["MessageAttributes"] = attrs
        out["MD5OfMessageAttributes"] = digests.attributes_md5(attrs)
    return out


def receive(principal: Principal, name: str, request: dict[str, Any], query: bool = False) -> dict[str, Any]:
    """Up to MaxNumberOfMessages (1-10) messages, hidden for VisibilityTimeout (the queue's by
    default); with WaitTimeSeconds (or the queue's ReceiveMessageWaitTimeSeconds), a long poll on
    the shared wait until one arrives. On a FIFO queue, a ReceiveRequestAttemptId retried within
    five minutes answers the same messages and receipt handles while none was touched since (the
    SQL decides; a standard queue ignores the id, as SQS does)."""
    tenancy.require(principal, "write")
    qty = integer_parameter(request.get("MaxNumberOfMessages"), "MaxNumberOfMessages", 1, MAX_RECEIVE) or 1
    vt = integer_parameter(request.get("VisibilityTimeout"), "VisibilityTimeout", 0, MAX_VISIBILITY)
    wait = integer_parameter(request.get("WaitTimeSeconds"), "WaitTimeSeconds", 0, MAX_WAIT_SECONDS)
    attempt_id = request.get("ReceiveRequestAttemptId")
    if attempt_id is not None and (not isinstance(attempt_id, str) or not _GROUP.fullmatch(attempt_id)):
        raise errors.fifo_id(attempt_id, "ReceiveRequestAttemptId")
    system, wanted = _wanted_system(request, query), _wanted_attributes(request)
    queue = meta(principal, name)
    if wait is None:
        wait = int(queue.setting("ReceiveMessageWaitTimeSeconds"))
    args = (principal.tenant_id, tenancy.project_id(principal), name, qty, vt, attempt_id)
    channels = [wakeup.channel(wakeup.QUEUE, queue.id)]

    def claim() -> tuple[list[dict[str, Any]], list[str]]:
        with db.connection() as conn, db.domain_errors():
            return conn.execute("SELECT sqs_receive(%s, %s, %s, %s, %s, %s)", args).fetchone()[0], channels

    rows = _in_sqs_terms(lambda: wakeup.long_poll(claim, float(wait), caller=wait_slots.caller(principal)))
    if not rows:
        return {}  # as SQS answers an empty receive: no Messages member
    return {"Messages": [_received(queue, principal, r, system, wanted) for r in rows]}


# ---- deleting and changing visibility by receipt ----------------------------------------------


def delete(principal: Principal, name: str, handle: Any) -> dict[str, Any]:
    tenancy.require(principal, "write")
    queue = meta(principal, name)
    receipt_read = receipts.open_handle(handle, queue.id)
    (done,) = _in_sqs_terms(lambda: _delete(principal, name, queue, [receipt_read]))
    if not done:
        raise errors.receipt_expired(handle)
    return {}


def _delete(principal: Principal, name: str, queue: SqsQueue, receipts: list[tuple[int, int]]) -> list[bool]:
    """Whether each (message id, read count) of a receipt was deleted (or was gone already). A
    standard queue deletes by any receipt of the message; a FIFO queue only by the receipt of the
    receive that still holds it (sqs_fifo_delete), as SQS has each."""
    with db.connection() as conn, db.domain_errors():
        if not queue.fifo:
            conn.execute("SELECT queue_delete(%s, %s, %s, %s::bigint[])",
                         (principal.tenant_id, tenancy.project_id(principal), name,
                          engine.int_array([r[0] for r in receipts])))
            return [True] * len(receipts)
        outcomes = conn.execute("SELECT sqs_fifo_delete(%s, %s, %s, %s::bigint[], %s::int[])",
                                (principal.tenant_id, tenancy.project_id(principal), name,
                                 engine.int_array([r[0] for r in receipts]),
                                 engine.int_array([r[1] for r in receipts]))).fetchone()[0]
    return [outcome == "ok" for outcome in outcomes]


def delete_batch(principal: Principal, name: str, entries: Any) -> dict[str, Any]:
    tenancy.require(principal, "write")
    entries = check_entries(entries, "DeleteMessageBatchRequestEntry")
    queue = meta(principal, name)
    good, failed = [], []
    for entry in entries:
        try:
            good.append((entry, receipts.open_handle(entry.get("ReceiptHandle"), queue.id)))
        except errors.SqsError as error:
            failed.append(_failure(entry["Id"], error))
    done = []
    if good:
        outcomes = _in_sqs_terms(lambda: _delete(principal, name, queue, [r for _, r in good]))
        for (entry, _), deleted in zip(good, outcomes, strict=True):
            if deleted:
                done.append({"Id": entry["Id"]})
            else:
                failed.append(_failure(entry["Id"], errors.receipt_expired(entry["ReceiptHandle"])))
    return {"Successful": done, "Failed": failed}


def _change(principal: Principal, name: str, changes: list[tuple[int, int, int]]) -> list[str]:
    with db.connection() as conn, db.domain_errors():
        return conn.execute(
            "SELECT sqs_change_visibility(%s, %s, %s, %s::bigint[], %s::int[], %s::float8[])",
            (principal.tenant_id, tenancy.project_id(principal), name, engine.int_array([c[0] for c in changes]),
             engine.int_array([c[1] for c in changes]), engine.int_array([c[2] for c in changes])),
        ).fetchone()[0]


def _outcome(result: str, handle: str) -> errors.SqsError | None:
    if result == "ok":
        return None
    if result == "not_in_flight":
        return errors.not_in_flight()
    if result == "gone":
        return errors.message_gone(handle)
    return errors.receipt_expired(handle)


def _visibility(value: Any) -> int:
    if value is None:
        raise errors.missing_parameter("VisibilityTimeout")
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_VISIBILITY:
        raise errors.visibility_beyond_limit(value, MAX_VISIBILITY)
    return integer_parameter(value, "VisibilityTimeout", 0, MAX_VISIBILITY)  # type: ignore[return-value]


def change_visibility(principal: Principal, name: str, handle: Any, timeout: Any) -> dict[str, Any]:
    tenancy.require(principal, "write")
    queue = meta(principal, name)
    msg_id, read_ct = receipts.open_handle(handle, queue.id)
    (result,) = _in_sqs_terms(lambda: _change(principal, name, [(msg_id, read_ct, _visibility(timeout))]))
    error = _outcome(result, handle)
    if error is not None:
        raise error
    return {}


def change_visibility_batch(principal: Principal, name: str, entries: Any) -> dict[str, Any]:
    tenancy.require(principal, "write")
    entries = check_entries(entries, "ChangeMessageVisibilityBatchRequestEntry")
    queue = meta(principal, name)
    good, failed = [], []
    for entry in entries:
        try:
            msg_id, read_ct = receipts.open_handle(entry.get("ReceiptHandle"), queue.id)
            good.append((entry, (msg_id, read_ct, _visibility(entry.get("VisibilityTimeout")))))
        except errors.SqsError as error:
            failed.append(_failure(entry["Id"], error))
    done = []
    if good:
        results = _in_sqs_terms(lambda: _change(principal, name, [c for _, c in good]))
        for (entry, _), result in zip(good, results, strict=True):
            error = _outcome(result, entry["ReceiptHandle"])
            if error is None:
                done.append({"Id": entry["Id"]})
            else:
                failed.append(_failure(entry["Id"], error))
    return {"Successful": done, "Failed": failed}
