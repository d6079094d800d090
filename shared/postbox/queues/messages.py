"""Queues: sending, reading (with long polling), archiving and browsing messages.

Send, read and archive are one SQL function call each (queue_send, queue_read, queue_archive).
"""

from __future__ import annotations

from typing import Any

from .. import db, jsoncodec, tenancy, wait_slots, wakeup
from ..errors import Invalid, NotFound, TooLarge
from ..tenancy import Principal
from . import consumers, engine
from .catalog import find, require

MAX_HEADERS_BYTES = 4096


# ---- messages ---------------------------------------------------------------------------------


def _principal_args(principal: Principal) -> tuple[str, str]:
    return principal.tenant_id, tenancy.project_id(principal)


_SEND = "SELECT * FROM queue_send(%s, %s, %s, %s, %b::text[], %s::int[], %s, %s, %s::jsonb)"
# A single message goes as one text parameter: psycopg adapts a string in a fraction of a list's time.
_SEND_ONE = _SEND.replace("%b::text[]", "ARRAY[%s::text]")


def send_messages(
    principal: Principal, name: str, messages: list[Any], *, delay: float = 0, headers: Any = None
) -> list[int]:
    """Send messages in order, within the plan's size, monthly and storage limits (SQL: queue_send,
    one round trip: lookup, limits, insert, monthly count and the long-poll wake-up together; it also
    says when the queue's consumer was idle, and this send then starts its dispatch)."""
    if not principal.is_anonymous:
        require(principal, "write")
    try:
        encoded = [jsoncodec.dumps(m, strict=True) for m in messages]
        header_raw = jsoncodec.dumps(headers, strict=True) if headers is not None else b""
    except ValueError as error:  # NaN or an infinity: no JSON form, and jsonb refuses them
        raise Invalid(f"Messages and headers must be JSON: {error}.") from None
    if len(header_raw) > MAX_HEADERS_BYTES:
        raise TooLarge(f"headers are over {MAX_HEADERS_BYTES} bytes.")
    sizes = [len(m) + len(header_raw) for m in encoded]
    texts = [m.decode() for m in encoded]
    with db.connection() as conn, db.domain_errors():
        rows = conn.execute(
            _SEND_ONE if len(texts) == 1 else _SEND,
            (*_principal_args(principal), name, principal.is_anonymous, texts[0] if len(texts) == 1 else texts,
             engine.int_array(sizes), max(sizes) - len(header_raw), delay,
             header_raw.decode() if headers is not None else None),
            binary=True,
        ).fetchall()
    if rows and rows[0][1] is not None:  # this send found the queue's consumer idle: start it
        consumers.start_dispatch(rows[0][1])
    return [r[0] for r in rows]


def _queue_id(principal: Principal, name: str) -> int:
    with db.connection() as conn, db.domain_errors():
        return conn.execute("SELECT (queue_find(%s, %s, %s)).id", (*_principal_args(principal), name)).fetchone()[0]


def read_messages(
    principal: Principal, name: str, qty: int, vt: float | None, wait_seconds: float = 0
) -> list[dict[str, Any]]:
    """Claim up to `qty` messages (SQL: queue_read, one round trip answering a JSON array); with
    `wait_seconds`, long-poll until one arrives (as SQS does)."""
    require(principal, "write")
    args = _principal_args(principal)
    channels: list[str] = []

    def attempt() -> tuple[list[dict[str, Any]], list[str]]:
        with db.connection() as conn, db.domain_errors():
            found = conn.execute("SELECT queue_read(%s, %s, %s, %s, %s)", (*args, name, qty, vt),
                                 binary=True).fetchone()[0]
        if not found and not channels and wait_seconds > 0:
            channels.append(wakeup.channel(wakeup.QUEUE, _queue_id(principal, name)))
        return found, channels

    return wakeup.long_poll(attempt, wait_seconds, caller=wait_slots.caller(principal))


def pop_messages(principal: Principal, name: str, qty: int) -> list[dict[str, Any]]:
    require(principal, "write")
    with db.transaction() as conn:
        queue = find(conn, principal, name)
        return [m.as_dict() for m in engine.pop(conn, queue.ref.id, qty)]


def archive_messages(principal: Principal, name: str, ids: list[int]) -> list[int]:
    """Archive waiting messages; returns their ids in order (SQL: queue_archive, one round trip)."""
    require(principal, "write")
    with db.connection() as conn, db.domain_errors():
        return conn.execute("SELECT queue_archive(%s, %s, %s, %s::bigint[])",
                            (*_principal_args(principal), name, engine.id_array(ids))).fetchone()[0]


def delete_messages(principal: Principal, name: str, ids: list[int]) -> list[int]:
    """Delete waiting messages; returns their ids in order (SQL: queue_delete, one round trip)."""
    require(principal, "write")
    with db.connection() as conn, db.domain_errors():
        return conn.execute("SELECT queue_delete(%s, %s, %s, %s::bigint[])",
                            (*_principal_args(principal), name, engine.id_array(ids))).fetchone()[0]


def delete_message(principal: Principal, name: str, msg_id: int) -> list[int]:
    deleted = delete_messages(principal, name, [msg_id])
    if not deleted:
        raise NotFound("No such message.")
    return deleted


def set_visibility(principal: Principal, name: str, msg_id: int, vt: float) -> dict[str, Any]:
    require(principal, "write")
    with db.transaction() as conn:
        message = engine.set_vt(conn, find(conn, principal, name).ref.id, msg_id, vt)
        if message is None:
            raise NotFound("The message isn't waiting in this queue.")
        return message.as_dict()


def purge_queue(principal: Principal, name: str, include_archived: bool) -> int:
    require(principal, "write")
    with db.transaction() as conn:
        return engine.purge(conn, find(conn, principal, name).ref.id, include_archived)


def browse_messages(
    principal: Principal, name: str, state: str, limit: int, before: int | None
) -> dict[str, Any]:
    require(principal, "read")
    with db.transaction() as conn:
        items = engine.browse(conn, find(conn, principal, name).ref.id, state, limit, before)
    next_before = items[-1]["msg_id"] if len(items) == limit else None
    return {"messages": items, "next_before": next_before}
