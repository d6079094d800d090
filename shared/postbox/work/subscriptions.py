"""Subscriptions: a subscriber bound to a queue of either consumer mode, with a filter.

On a broadcast queue, deliveries are written by the publish (one per active subscription whose
filter matches), so every subscription processes every message once, independently of the others.
On a competing queue the subscriber claims the queue's own messages that its filter lets through,
competing with every other claimer, never holding more than max_in_flight. Either way a claim,
complete, fail or release through the subscription is one SQL call (`work_subscription_claim`,
`work_subscription_finish`). Push subscriptions are delivered by an agent (`push`); their signing
secret is answered once, when it is made.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import psycopg

from .. import db, limits, outbound
from ..errors import NotFound, Unprocessable
from ..tenancy import Principal, require
from . import acl, audit, hitl
from .common import CONSUME, MANAGE, MESSAGE_NOT_FOUND, SCOPE_NOT_FOUND, VIEW, as_json, parse_id

SUBSCRIPTION_NOT_FOUND = "SCAIQUEUE_SUBSCRIPTION_NOT_FOUND"
ACTIONS = ("complete", "fail", "release")

_DOC = """jsonb_build_object(
    'tenant_id', x.tenant_id,
    'id', x.id, 'scope_id', x.scope_id, 'queue_id', q.queue_id,
    'consumer_mode', q.consumer_mode,
    'subscriber_type', x.subscriber_type, 'subscriber_id', x.subscriber_id, 'filter', x.filter,
    'delivery_mode', x.delivery_mode, 'push_url', x.push_url, 'auto_claim', x.auto_claim,
    'max_in_flight', x.max_in_flight, 'state', x.state, 'created_at', x.created_at, 'updated_at', x.updated_at,
    'deliveries', CASE WHEN q.consumer_mode = 'broadcast' THEN (SELECT jsonb_build_object(
        'pending', count(*) FILTER (WHERE d.state = 'pending'),
        'in_flight', count(*) FILTER (WHERE d.state = 'claimed'),
        'completed', count(*) FILTER (WHERE d.state = 'completed'),
        'dead_lettered', count(*) FILTER (WHERE d.state = 'dead_lettered'))
        FROM work_deliveries d WHERE d.subscription_id = x.id)
        ELSE jsonb_build_object('in_flight', work_subscription_held(x.id)) END)"""
_FROM = "work_subscriptions x JOIN work_queues q ON q.id = x.queue_id"


def _missing() -> NotFound:
    return NotFound("Subscription not found.", code=SUBSCRIPTION_NOT_FOUND)


def sub_id_of(value: str) -> str:
    """A path's subscription id; anything that is not a UUID names no subscription (404)."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise _missing() from None


def _one(conn: psycopg.Connection, scope_id: str, sub_id: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_DOC} FROM {_FROM} WHERE x.id = %s AND x.scope_id = %s",
                       (sub_id, scope_id)).fetchone()
    if row is None:
        raise _missing()
    return row[0]


def _new_secret() -> str:
    return "whsec_" + secrets.token_hex(24)


def _push_needs_url(mode: str | None, url: str | None) -> None:
    if mode == "push" and not url:
        raise Unprocessable("Push delivery needs a push_url.",
                            fields=[{"field": "push_url", "message": "required with delivery_mode push"}])


def _check_push_url(url: str | None) -> None:
    """A URL set must be one a push may go to (`outbound`'s rules; a host name is resolved, and its
    addresses checked, at every delivery)."""
    if url:
        try:
            outbound.check_url(url)
        except outbound.Refused as e:
            raise Unprocessable(f"push_url: {e}.", fields=[{"field": "push_url", "message": str(e)}]) from None


def create(principal: Principal, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A subscription on a queue of the scope, within the plan's subscriptions (and webhooks, for a
    push one): on a broadcast queue it receives the messages published from now on; on a competing
    queue its subscriber claims, filtered, from the shared queue."""
    tenant_id = require(principal, CONSUME)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    _push_needs_url(fields.get("delivery_mode"), fields.get("push_url"))
    _check_push_url(fields.get("push_url"))
    secret = _new_secret() if fields.get("delivery_mode") == "push" else None
    with db.transaction() as conn:
        queue_id = parse_id(fields["queue_id"], "SCAIQUEUE_QUEUE_NOT_FOUND")
        acl.load_scope(conn, principal, tenant_id, scope_id, CONSUME, hold=True, queue=queue_id)
        queue = conn.execute("SELECT id FROM work_queues WHERE queue_id = %s AND scope_id = %s FOR KEY SHARE",
                             (queue_id, scope_id)).fetchone()  # held: the subscription naming it is made first
        if queue is None:
            raise Unprocessable("No such queue in this scope.",
                                fields=[{"field": "queue_id", "message": "no such queue in this scope"}])
        limits.check(conn, tenant_id, limits.WORK_SUBSCRIPTIONS)
        if secret:
            limits.check(conn, tenant_id, limits.WEBHOOKS)
        sub_id = conn.execute(
            "INSERT INTO work_subscriptions (scope_id, tenant_id, queue_id, subscriber_type, subscriber_id, filter,"
            " delivery_mode, auto_claim, max_in_flight, push_url, push_secret)"
            " VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s) RETURNING id",
            (scope_id, tenant_id, queue[0], fields["subscriber_type"], fields["subscriber_id"],
             as_json(fields.get("filter")), fields.get("delivery_mode", "pull"), fields.get("auto_claim", False),
             fields.get("max_in_flight", 100), fields.get("push_url"), secret)).fetchone()[0]
        audit.record(conn, principal, "scaiqueue.subscription.created", "subscription", sub_id, scope_id=scope_id,
                     details={"subscriber_type": fields["subscriber_type"], "subscriber_id": fields["subscriber_id"]})
        return _one(conn, scope_id, str(sub_id)) | ({"push_secret": secret} if secret else {})


def list_subscriptions(principal: Principal, scope_id: str) -> list[dict[str, Any]]:
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        rows = conn.execute(f"SELECT {_DOC} FROM {_FROM} WHERE x.scope_id = %s"
                            " ORDER BY x.created_at, x.id", (scope_id,)).fetchall()
    return [r[0] for r in rows]


def get(principal: Principal, scope_id: str, sub_id: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    scope_id, sub_id = parse_id(scope_id, SCOPE_NOT_FOUND), sub_id_of(sub_id)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW, subscription=sub_id)
        return _one(conn, scope_id, sub_id)


def update(principal: Principal, scope_id: str, sub_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """PATCH filter, delivery_mode, push_url, auto_claim, max_in_flight; pause and resume set `state`.
    Switching to push (within the plan's webhooks) makes the signing secret (answered this once) if
    the subscription has none."""
    tenant_id = require(principal, MANAGE)
    scope_id, sub_id = parse_id(scope_id, SCOPE_NOT_FOUND), sub_id_of(sub_id)
    cols = {k: fields[k] for k in ("delivery_mode", "auto_claim", "max_in_flight", "state", "push_url")
            if k in fields}
    if "filter" in fields:
        cols["filter"] = as_json(fields["filter"])
    _check_push_url(fields.get("push_url"))
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE, subscription=sub_id)
        found = conn.execute("SELECT delivery_mode, push_url, push_secret FROM work_subscriptions"
                             " WHERE id = %s AND scope_id = %s FOR UPDATE", (sub_id, scope_id)).fetchone()
        if found is None:
            raise _missing()
        mode, url = cols.get("delivery_mode", found[0]), cols.get("push_url", found[1])
        _push_needs_url(mode, url)
        if mode == "push" and found[0] != "push":  # one more webhook
            limits.check(conn, tenant_id, limits.WEBHOOKS)
        secret = _new_secret() if mode == "push" and not found[2] else None
        if secret:
            cols["push_secret"] = secret
        sets = "".join(f"{k} = %({k})s{'::jsonb' if k == 'filter' else ''}, " for k in cols)
        conn.execute(f"UPDATE work_subscriptions SET {sets}updated_at = clock_timestamp() WHERE id = %(id)s",
                     {"id": sub_id, **cols})
        action = {"paused": "paused", "active": "resumed"}.get(fields.get("state")) if list(fields) == ["state"] \
            else "updated"
        audit.record(conn, principal, "scaiqueue.subscription." + action, "subscription", sub_id, scope_id=scope_id,
                     details={"fields": sorted(fields)})
        return _one(conn, scope_id, sub_id) | ({"push_secret": secret} if secret else {})


def delete(principal: Principal, scope_id: str, sub_id: str) -> None:
    """Delete a subscription and its deliveries; broadcast messages waiting only for it settle, and the
    messages of a competing queue it holds are released at once."""
    tenant_id = require(principal, MANAGE)
    scope_id, sub_id = parse_id(scope_id, SCOPE_NOT_FOUND), sub_id_of(sub_id)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE, subscription=sub_id)
        # The subscription first, as its claims take it, before the journal lock a release takes.
        conn.execute("SELECT 1 FROM work_subscriptions WHERE id = %s AND scope_id = %s FOR UPDATE", (sub_id, scope_id))
        ids = conn.execute("SELECT message_id FROM work_deliveries WHERE subscription_id = %s"
                           " AND state IN ('pending', 'claimed')", (sub_id,)).fetchall()
        with db.domain_errors():
            conn.execute("SELECT work_subscription_release(%s, %s, %s, %s, %s)",
                         (tenant_id, scope_id, sub_id, *principal.actor))
        if conn.execute("DELETE FROM work_subscriptions WHERE id = %s AND scope_id = %s RETURNING id",
                        (sub_id, scope_id)).fetchone() is None:
            raise _missing()
        conn.execute("SELECT work_settle(%s::uuid[])", ([r[0] for r in ids],))
        audit.record(conn, principal, "scaiqueue.subscription.deleted", "subscription", sub_id, scope_id=scope_id)


def claim(principal: Principal, scope_id: str, sub_id: str, batch_size: int,
          visibility_timeout_s: int | None) -> list[dict[str, Any]]:
    """Pull: up to batch_size of the subscription's pending deliveries (broadcast) or of the queue's
    messages its filter lets through (competing), within max_in_flight."""
    tenant_id = require(principal, CONSUME)
    scope_id, sub_id = parse_id(scope_id, SCOPE_NOT_FOUND), sub_id_of(sub_id)
    with db.connection() as conn, db.domain_errors():
        return conn.execute(f"SELECT work_subscription_claim(%s, %s, %s, %s, %s, %s, %s, %s) FROM {acl.ENTER} _",
                            (tenant_id, scope_id, sub_id, batch_size, visibility_timeout_s, principal.key_id,
                             *principal.actor,
                             acl.guard(principal, tenant_id, scope_id, CONSUME, subscription=sub_id))).fetchone()[0]


def finish(principal: Principal, scope_id: str, sub_id: str, message_id: str, action: str,
           item: dict[str, Any]) -> dict[str, Any]:
    """complete | fail | release the subscription's delivery of one message (or, on a competing queue,
    the message it holds)."""
    tenant_id = require(principal, CONSUME)
    scope_id, sub_id = parse_id(scope_id, SCOPE_NOT_FOUND), sub_id_of(sub_id)
    item = {**item, "id": parse_id(message_id, MESSAGE_NOT_FOUND)}
    with db.connection() as conn, db.domain_errors(), hitl.response_errors():
        return conn.execute(f"SELECT work_subscription_finish(%s, %s, %s, %s, %s::jsonb, %s, %s) FROM {acl.ENTER} _",
                            (tenant_id, scope_id, sub_id, action, as_json(item), *principal.actor,
                             acl.guard(principal, tenant_id, scope_id, CONSUME, subscription=sub_id))).fetchone()[0]


def processed(principal: Principal, sub_id: str, message_ids: list[str]) -> dict[str, bool]:
    """{message_id: bool}: whether the subscription has completed each message (ids as given)."""
    tenant_id = require(principal, CONSUME)
    sub_id = sub_id_of(sub_id)
    parsed: dict[str, str | None] = {}
    for given in message_ids:
        try:
            parsed[given] = str(uuid.UUID(given))
        except ValueError:
            parsed[given] = None  # names no message: not processed
    with db.connection() as conn, db.domain_errors():
        found = conn.execute(f"SELECT work_subscription_processed(%s, %s, %s::uuid[]) FROM {acl.GATE} _",
                             (tenant_id, sub_id, [v for v in parsed.values() if v],
                              acl.guard(principal, tenant_id, None, CONSUME, subscription=sub_id))).fetchone()[0]
    return {given: bool(found.get(canonical)) if canonical else False for given, canonical in parsed.items()}
