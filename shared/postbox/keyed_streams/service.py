"""The streams surface's units of work: one transaction per call, for one principal.

Handlers call these with what they parsed; each checks the role, resolves the project (a key bound
to a project always works in its own), and answers plain dicts shaped as the spec shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from .. import db, history, names, wait_slots, wakeup
from ..errors import Conflict, Invalid, NotFound
from ..tenancy import DEFAULT_PROJECT, Principal
from . import access, catalog, delivery, lifecycle, messages, publishing, subscriptions
from .durations import default_retention, iso, parse_duration

T = TypeVar("T")


def _work(fn: Callable[[psycopg.Connection], T], *, autocommit: bool = False) -> T:
    """Run one unit of work in one transaction (`autocommit`: each statement its own); one the
    database breaks off (a deadlock, rare, between agents and writers) is run again."""
    def run(conn: psycopg.Connection) -> T:
        with db.domain_errors():
            return fn(conn)

    if autocommit:
        with db.connection() as conn:
            return run(conn)
    return db.transact(run)


def _stream(conn: psycopg.Connection, principal: Principal, name: str, project: str | None,
            *, lock: bool = False) -> catalog.Stream:
    return catalog.find(conn, access.project(conn, principal, project), name, lock=lock)


# ---- streams ------------------------------------------------------------------------------------


def list_streams(principal: Principal, project: str | None) -> dict[str, Any]:
    access.require(principal, "read")

    def run(conn):
        found = catalog.listing(conn, principal.tenant_id, access.project_filter(conn, principal, project))
        names = subscriptions.names_by_stream(conn, [s.id for s in found])
        active = subscriptions.active_keys(conn, list(names))
        return {"streams": [{
            "name": s.name,
            "project": s.project.name,
            "messages": s.messages,
            "active_keys": active.get(s.id, 0),
            "scheduled": s.scheduled,
            "subscriptions": names.get(s.id, []),
            "created_at": iso(s.created_at),
        } for s in found]}

    return _work(run)


def _retention(value: str | None) -> tuple[str | None, int | None]:
    """(stored text, ms) for a retention the caller sent; None text means the default."""
    if value is None:
        return None, None
    ms = parse_duration(value)
    return value.strip().lower(), ms


def create_stream(principal: Principal, name: str, project: str | None, retention: str | None,
                  max_backlog: int | None) -> dict[str, Any]:
    access.require(principal, "manage")
    text, ms = _retention(retention)

    def run(conn):
        where = access.project(conn, principal, project)
        stream = catalog.create(conn, principal.tenant_id, where, name, text, ms, max_backlog or None)
        return {"name": stream.name, "project": where.name, "created": True}

    return _work(run)


def _settings(stream: catalog.Stream) -> dict[str, Any]:
    return {
        "retention": stream.retention if stream.retention is not None else default_retention(),
        "max_backlog": stream.max_backlog,
    }


def get_stream(principal: Principal, name: str, project: str | None) -> dict[str, Any]:
    access.require(principal, "read")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        return {
            "name": stream.name,
            "project": stream.project.name,
            "messages": stream.messages,
            **_settings(stream),
            "effective_retention_ms": lifecycle.retention_ms(stream),
            "effective_max_backlog": publishing.max_backlog(stream),
            "created_at": iso(stream.created_at),
        }

    return _work(run)


def stream_history(principal: Principal, name: str, project: str | None, window: str) -> dict[str, Any]:
    """The stream's depth, oldest age and messages in and out per minute over `window` (charts)."""
    access.require(principal, "read")
    return _work(lambda conn: history.series(conn, "stream", _stream(conn, principal, name, project).id, window))


def patch_stream(principal: Principal, name: str, project: str | None, changes: dict[str, Any]) -> dict[str, Any]:
    access.require(principal, "manage")
    if not changes:
        raise Invalid("nothing to update: send retention and/or max_backlog", code="nothing_to_update")
    update: dict[str, Any] = {}
    if "retention" in changes:
        update["retention"], update["retention_ms"] = _retention(changes["retention"])
    if "max_backlog" in changes:
        update["max_backlog"] = changes["max_backlog"] or None

    def run(conn):
        stream = _stream(conn, principal, name, project, lock=True)
        catalog.update(conn, stream, update)
        stream = catalog.find(conn, stream.project, name)
        return {"name": stream.name, "project": stream.project.name, **_settings(stream)}

    return _work(run)


def delete_stream(principal: Principal, name: str, project: str | None) -> dict[str, Any]:
    access.require(principal, "manage")

    def run(conn):
        stream = _stream(conn, principal, name, project, lock=True)
        subs = subscriptions.of_stream(conn, stream.id)
        if subs:
            raise Conflict("delete this stream's subscriptions first: " + ", ".join(s.name for s in subs),
                           code="subscriptions_exist")
        removed = catalog.delete(conn, stream)
        return {"name": stream.name, "project": stream.project.name, "deleted": True, "messages_deleted": removed}

    return _work(run)


# ---- messages -----------------------------------------------------------------------------------


def publish(principal: Principal, name: str, project: str | None,
            batch: list[publishing.Outgoing]) -> list[publishing.Answer]:
    """All or nothing (a single publish): the first refused message raises its error and nothing is
    published. One round trip."""
    return _publish(principal, name, project, batch, strict=True)  # type: ignore[return-value]


def publish_each(principal: Principal, name: str, project: str | None,
                 batch: list[publishing.Outgoing | publishing.Refused]) -> list[publishing.Answer | publishing.Refused]:
    """A batch, each message on its own: a refused one says why and the others are published, in one
    round trip and one transaction; each published (or replayed) one is answered with its id,
    offset and status. Items the caller already refused (their shape) keep their place."""
    keep = [i for i, item in enumerate(batch) if isinstance(item, publishing.Outgoing)]
    answers = _publish(principal, name, project, [batch[i] for i in keep], strict=False,  # type: ignore[misc]
                       documents=False)
    out: list[publishing.Answer | publishing.Refused] = list(batch)  # type: ignore[arg-type]
    for i, answer in zip(keep, answers, strict=True):
        out[i] = answer
    return out


def _publish(principal: Principal, name: str, project: str | None, batch: list[publishing.Outgoing], *,
             strict: bool, documents: bool = True) -> list[publishing.Answer | publishing.Refused]:
    access.require(principal, "write")
    names.KEYED_STREAM.check(name, "stream", code="invalid_name")  # the publish may create it
    where = project or DEFAULT_PROJECT

    def run(conn):
        return publishing.publish(conn, principal.tenant_id, principal.project_id, where, name, batch, strict=strict,
                                  documents=documents)

    return _work(run, autocommit=True)  # the publish is one statement


def browse(principal: Principal, name: str, project: str | None, *, key: str | None, status: str | None,
           q: str | None, limit: int, before_offset: int | None) -> dict[str, Any]:
    access.require(principal, "read")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        lifecycle.catch_up(conn, stream.id)
        found, cursor = messages.browse(conn, stream, key=key, status=status, q=q, limit=limit,
                                        before_offset=before_offset)
        return {"messages": found, "next_before_offset": cursor}

    return _work(run)


def _message_not_found(stream: catalog.Stream, offset: int) -> NotFound:
    return NotFound(f"no message at offset {offset} in stream {stream.name}", code="message_not_found")


def get_message(principal: Principal, name: str, project: str | None, offset: int) -> dict[str, Any]:
    access.require(principal, "read")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        lifecycle.catch_up(conn, stream.id)
        docs = messages.documents(conn, stream, list(messages.by_offsets(conn, stream.id, [offset]).values()))
        if not docs:
            raise _message_not_found(stream, offset)
        return docs[0]

    return _work(run)


def cancel(principal: Principal, name: str, project: str | None, offset: int) -> dict[str, Any]:
    """Cancel a scheduled message (409 once it is available, cancelled or expired)."""
    access.require(principal, "write")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        lifecycle.catch_up(conn, stream.id)
        row = messages.set_status(conn, stream.id, offset, "scheduled", "cancelled")
        if row is None:
            current = messages.by_offsets(conn, stream.id, [offset]).get(offset)
            if current is None:
                raise _message_not_found(stream, offset)
            raise Conflict(f"only a scheduled message can be cancelled; this one is {current.status}",
                           code="not_scheduled")
        catalog.count(conn, stream.id, scheduled=-1)
        return messages.documents(conn, stream, [row])[0]

    return _work(run)


# ---- subscriptions ------------------------------------------------------------------------------


def create_subscription(principal: Principal, name: str, project: str | None, sub_name: str, *,
                        max_deliveries: int, lease_ms: int, start: str) -> dict[str, Any]:
    access.require(principal, "manage")

    def run(conn):
        stream = _stream(conn, principal, name, project, lock=True)
        sub = subscriptions.create(conn, stream, sub_name, max_deliveries, lease_ms)
        if start == "earliest":
            delivery.enqueue_retained(conn, stream.id, sub.id)
            sub = subscriptions.find(conn, stream, sub_name)
        return subscriptions.document(conn, stream, sub)

    return _work(run)


def list_subscriptions(principal: Principal, name: str, project: str | None) -> dict[str, Any]:
    access.require(principal, "read")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        return {"subscriptions": [subscriptions.document(conn, stream, s)
                                  for s in subscriptions.of_stream(conn, stream.id)]}

    return _work(run)


def get_subscription(principal: Principal, name: str, project: str | None, sub_name: str) -> dict[str, Any]:
    access.require(principal, "read")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        return subscriptions.document(conn, stream, subscriptions.find(conn, stream, sub_name))

    return _work(run)


def delete_subscription(principal: Principal, name: str, project: str | None, sub_name: str) -> dict[str, Any]:
    access.require(principal, "manage")

    def run(conn):
        stream = _stream(conn, principal, name, project, lock=True)  # no publish fans out to it meanwhile
        sub = subscriptions.find(conn, stream, sub_name)
        subscriptions.delete(conn, sub)
        return {"name": sub.name, "stream": stream.name, "project": stream.project.name, "deleted": True}

    return _work(run)


def dead_letters(principal: Principal, name: str, project: str | None, sub_name: str, *, limit: int,
                 before_offset: int | None) -> dict[str, Any]:
    access.require(principal, "read")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        sub = subscriptions.find(conn, stream, sub_name)
        dead = delivery.dead_letters(conn, sub.id, limit, before_offset)
        rows = messages.by_offsets(conn, stream.id, [o for o, _, _ in dead])
        docs = {d["offset"]: d for d in messages.documents(conn, stream, list(rows.values()))}
        return {"messages": [{**docs[o], "attempts": attempts, "dead_at": iso(at)}
                             for o, attempts, at in dead if o in docs]}

    return _work(run)


def consume(principal: Principal, name: str, project: str | None, sub_name: str, *, max_messages: int,
            lease_ms: int | None, wait_ms: int) -> dict[str, Any]:
    """Lease up to `max_messages` messages, one per key; waits up to `wait_ms` for one to arrive."""
    access.require(principal, "write")

    def run(conn):
        stream = _stream(conn, principal, name, project)
        sub = subscriptions.find(conn, stream, sub_name)
        lifecycle.catch_up(conn, stream.id)
        leased = delivery.claim(conn, sub, max_messages, lease_ms or sub.lease_ms)
        rows = messages.by_offsets(conn, stream.id, [d.offset for d in leased])
        docs = {d["offset"]: d for d in messages.documents(conn, stream, [rows[d.offset] for d in leased])}
        found = [{**docs[d.offset], "receipt": d.receipt, "attempt": d.attempt,
                  "lease_expires_at": iso(d.lease_until)} for d in leased if d.offset in docs]
        return found, [lifecycle.channel(stream.id)]

    return {"messages": wakeup.long_poll(lambda: _work(run), wait_ms / 1000, caller=wait_slots.caller(principal))}


def _receipts(receipts: list[str]) -> list:
    pairs = delivery.parse_receipts(receipts)
    if pairs is None:
        raise Invalid("a receipt is malformed: use the receipt a consume answered with", code="invalid_receipt")
    return pairs


def ack(principal: Principal, name: str, project: str | None, sub_name: str, receipts: list[str]) -> dict[str, Any]:
    access.require(principal, "write")
    pairs = _receipts(receipts)

    def run(conn):
        stream = _stream(conn, principal, name, project)
        sub = subscriptions.find(conn, stream, sub_name)
        acked = delivery.ack(conn, sub.id, pairs)
        return {"acked": acked, "lost": sorted({o for o, _ in pairs} - set(acked))}

    return _work(run)


def nack(principal: Principal, name: str, project: str | None, sub_name: str, receipts: list[str],
         delay_ms: int) -> dict[str, Any]:
    access.require(principal, "write")
    pairs = _receipts(receipts)

    def run(conn):
        stream = _stream(conn, principal, name, project)
        sub = subscriptions.find(conn, stream, sub_name)
        released = delivery.nack(conn, sub.id, pairs, delay_ms)
        return {"released": released, "lost": sorted({o for o, _ in pairs} - set(released))}

    return _work(run)
