"""Publish, claim and finish messages: each one SQL function call (`work_publish_routed`, `work_claim_text`,
`work_finish`, `work_finish_batch` in sql/functions/), whose refusals arrive as typed errors with
the surface's codes.

Claim tokens: every claim hands out a new `claim_token`. complete, fail, release and extend take
it back (optional for the spec's clients); once a claim ran out and another consumer claimed the
message, the old token no longer matches and the late consumer gets SCAIQUEUE_NOT_CLAIMED.

A subscriber may claim and finish through these routes too: it names its subscription
(`subscription_id`), or calls with a work key whose subject subscribes to the queue; the call is
then its subscription's (`work_claim_as`, `work_finish_as`, still one call). A tenant key naming
no subscription takes the plain path, unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from .. import db, errors, jsoncodec
from ..errors import Conflict, PostboxError, Unprocessable
from ..tenancy import Principal, require
from . import hitl, schemas
from .acl import ENTER, guard
from .common import CONSUME, MANAGE, MESSAGE_NOT_FOUND, PUBLISH, QUEUE_NOT_FOUND, SCOPE_NOT_FOUND, as_json, parse_id
from .subscriptions import sub_id_of

SCHEMA_STALE = "SCAIQUEUE_SCHEMA_STALE"
SUBSCRIBER_ACTIONS = ("complete", "fail", "release")
MAX_BATCH = 100  # messages a batch publish takes
ACTIONS = {"complete": CONSUME, "fail": CONSUME, "release": CONSUME, "extend": CONSUME, "cancel": MANAGE}
# The fields a lean claim asks for (a JSON array; NULL: the full documents), read by work_claim_answer.
ATTRIBUTES = "set_config('postbox.claim_attributes', %s, true)"
# A single publish: (tenant, scope, queue, the message's JSON, the key id, the schema id, the ACL gate).
PUBLISH_SQL = f"SELECT work_publish_routed(%s, %s, %s, %s::jsonb, %s, %s) FROM {ENTER} _"


def _prepared(principal: Principal, tenant_id: str, scope_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """A message's fields as the publish functions take them: a HITL pattern named expanded into its
    spec, the caller's actor as its source."""
    message = dict(message)
    pattern = message.pop("hitl_pattern", None)
    if pattern is not None:
        message["hitl_spec"] = hitl.spec_for_publish(tenant_id, scope_id, pattern)
    # The message's source is the caller's actor (a work API key's subject, or the tenant key itself).
    message["source_type"], message["source_id"] = principal.actor
    return message


def publish(principal: Principal, scope_id: str, queue_id: str, message: dict[str, Any]) -> tuple[dict, bool]:
    """(the message, whether it replays an earlier publish with the same idempotency key)."""
    tenant_id = require(principal, PUBLISH)
    scope_id, queue_id = parse_id(scope_id, SCOPE_NOT_FOUND), parse_id(queue_id, QUEUE_NOT_FOUND)
    message = _prepared(principal, tenant_id, scope_id, message)
    gate = guard(principal, tenant_id, scope_id, PUBLISH, queue=queue_id)

    def run(schema_id: str | None) -> dict[str, Any]:
        schema_id = schemas.checked(queue_id, schema_id, message.get("body"))
        with db.connection() as conn, db.domain_errors():
            return conn.execute(PUBLISH_SQL, (tenant_id, scope_id, queue_id, as_json(message), principal.key_id,
                                              schema_id, gate)).fetchone()[0]

    answer = _schema_retried(queue_id, schemas.believed(queue_id), run)
    return answer["message"], answer["replayed"]


def _schema_retried(queue_id: str, schema_id: str | None, run: Callable[[str | None], Any]) -> Any:
    """`run(schema id we believe the queue has)`, run again (3 runs at most) while the queue turns out
    to name another schema: what it names is learned, and the run checks the bodies against it."""
    for _ in range(2):
        try:
            return run(schema_id)
        except Conflict as e:
            if e.code != SCHEMA_STALE:
                raise
            schema_id = e.message or None
            schemas.learn(queue_id, schema_id)
    return run(schema_id)


def publish_batch(principal: Principal, scope_id: str, queue_id: str, entries: list[dict[str, Any] | PostboxError],
                  atomic: bool = False) -> list[dict[str, Any] | PostboxError]:
    """The batch extension: up to MAX_BATCH messages into one queue in one SQL call and one
    transaction (`work_publish_batch`), each checked, routed and published as `publish` publishes one
    (its schema, HITL pattern, idempotency key, routing, chunk stream), and each answered in its place:
    {id, queue_id, state, replayed}, or the error a single publish of it would raise. An entry the caller
    refused already (its shape) comes as that error and keeps its place. The scope, the queue and the
    caller's rights are the whole call's. With `atomic`, the first refused entry refuses the whole call,
    naming the entry (`in_entry`), and nothing is published."""
    tenant_id = require(principal, PUBLISH)
    scope_id, queue_id = parse_id(scope_id, SCOPE_NOT_FOUND), parse_id(queue_id, QUEUE_NOT_FOUND)
    if not 1 <= len(entries) <= MAX_BATCH:
        raise Unprocessable(f"messages: a batch holds 1 to {MAX_BATCH} messages",
                            fields=[{"field": "messages", "message": f"1 to {MAX_BATCH} messages"}])
    out: list[dict[str, Any] | PostboxError] = list(entries)
    for i, entry in enumerate(entries):
        if not isinstance(entry, PostboxError):
            try:
                out[i] = _prepared(principal, tenant_id, scope_id, entry)
            except PostboxError as e:
                out[i] = e
    gate = guard(principal, tenant_id, scope_id, PUBLISH, queue=queue_id)

    def run(schema_id: str | None) -> dict[str, Any]:
        ready = [i for i, m in enumerate(out) if not isinstance(m, PostboxError)]
        schema_id, refusals = schemas.checked_each(queue_id, schema_id, [out[i].get("body") for i in ready])
        for i, refusal in zip(ready, refusals, strict=True):
            if refusal is not None:
                out[i] = refusal
        _refuse_first(out, atomic)
        sent = [None if isinstance(m, PostboxError) else m for m in out]
        with db.connection() as conn, db.domain_errors():
            return conn.execute(f"SELECT work_publish_batch(%s, %s, %s, %s::jsonb, %s, %s, %s) FROM {ENTER} _",
                                (tenant_id, scope_id, queue_id, as_json(sent), principal.key_id, schema_id,
                                 atomic, gate)).fetchone()[0]

    answer = _schema_retried(queue_id, schemas.believed(queue_id), run)
    for i, found in enumerate(answer["entries"]):
        if found is not None:
            out[i] = {**found["message"], "replayed": found["replayed"]} if found["ok"] else _refusal(found["error"])
    _refuse_first(out, atomic)
    return out


def _refusal(error: dict[str, Any]) -> PostboxError:
    """An entry's refusal, as the error the same refusal of a single publish is."""
    found = errors.from_sqlstate(error["sqlstate"], error["message"] or "", error["code"], error["hint"])
    return found if found is not None else PostboxError(error["message"] or "")


def _refuse_first(answers: list[Any], atomic: bool) -> None:
    """An atomic batch with a refused entry: that refusal is the call's."""
    if atomic:
        for i, answer in enumerate(answers):
            if isinstance(answer, PostboxError):
                raise in_entry(i, answer)


def in_entry(index: int, error: PostboxError) -> PostboxError:
    """A batch entry's error as the whole call's: the same kind and code, its fields named under
    `messages.<index>` (a refusal without fields says `entry` in its details)."""
    details = dict(error.details)
    if "errors" in details:  # the request model's, located as a whole request's
        details["errors"] = [{**e, "loc": ["body", "messages", index, *e["loc"][1:]]} for e in details["errors"]]
    elif "fields" in details:
        details["fields"] = [{**f, "field": f"messages.{index}.{f['field']}"} for f in details["fields"]]
    else:
        details["entry"] = index
    return type(error)(f"messages.{index}: {error.message}", code=error.code, **details)


def claim(principal: Principal, scope_id: str, queue_id: str, batch_size: int,
          visibility_timeout_s: int | None, subscription_id: str | None = None,
          attributes: list[str] | None = None) -> list[dict[str, Any]]:
    """Up to `batch_size` messages in the queue's order, each with its claim token; a subscriber's
    claim (a subscription named, or a work key subscribing to the queue) is its subscription's.
    With `attributes` (the lean-answer extension) each message answers only those fields besides id
    and claim_token (work_claim_answer)."""
    return jsoncodec.loads(claim_text(principal, scope_id, queue_id, batch_size, visibility_timeout_s,
                                      subscription_id, attributes))


def claim_text(principal: Principal, scope_id: str, queue_id: str, batch_size: int,
               visibility_timeout_s: int | None, subscription_id: str | None = None,
               attributes: list[str] | None = None) -> str:
    """What `claim` answers, as the JSON text the database joined (the claim route passes it on as it
    is: no value is built per message on the way, in SQL or here)."""
    tenant_id = require(principal, CONSUME)
    scope_id, queue_id = parse_id(scope_id, SCOPE_NOT_FOUND), parse_id(queue_id, QUEUE_NOT_FOUND)
    gate = guard(principal, tenant_id, scope_id, CONSUME, queue=queue_id)
    with db.connection() as conn, db.domain_errors():
        if subscription_id is None and not principal.is_work_key:
            return conn.execute(f"SELECT work_claim_text(%s, %s, %s, %s, %s, %s, %s, %s) "
                                f"FROM {ENTER} _, {ATTRIBUTES} a",
                                (tenant_id, scope_id, queue_id, batch_size, visibility_timeout_s, principal.key_id,
                                 *principal.actor, gate, _attributes(attributes))).fetchone()[0]
        return conn.execute(f"SELECT work_claim_as(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)::text "
                            f"FROM {ENTER} _, {ATTRIBUTES} a",
                            (tenant_id, scope_id, queue_id, _subscription(subscription_id), batch_size,
                             visibility_timeout_s, principal.key_id, *principal.actor, principal.is_work_key,
                             gate, _attributes(attributes))).fetchone()[0]


def _attributes(attributes: list[str] | None) -> str | None:
    """What work_claim_answer reads: NULL for the full documents, else the names asked for."""
    return None if attributes is None else as_json(attributes)


def _subscription(value: str | None) -> str | None:
    """A body's subscription_id; one that is not a UUID names no subscription (404)."""
    return None if value is None else sub_id_of(value)


def finish(principal: Principal, scope_id: str, message_id: str, action: str, item: dict[str, Any]) -> dict:
    """complete | fail | release | extend | cancel one message; a refusal raises its error. complete,
    fail and release by a subscriber (`subscription_id` in the item, or a work key) end its own
    delivery of a broadcast message."""
    tenant_id = require(principal, ACTIONS[action])
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    sub_id = _subscription(item.pop("subscription_id", None))
    item = {**item, "id": parse_id(message_id, MESSAGE_NOT_FOUND)}
    gate = guard(principal, tenant_id, scope_id, ACTIONS[action], messages=[item["id"]])
    if action in SUBSCRIBER_ACTIONS and (sub_id is not None or principal.is_work_key):
        with db.connection() as conn, db.domain_errors(), hitl.response_errors():
            return conn.execute(f"SELECT work_finish_as(%s, %s, %s, %s::jsonb, %s, %s, %s, %s) FROM {ENTER} _",
                                (tenant_id, scope_id, action, as_json(item), sub_id, *principal.actor,
                                 principal.is_work_key, gate)).fetchone()[0]
    if action == "complete":  # the response must fit the message's HITL spec, if it has one
        with db.connection() as conn, db.domain_errors(), hitl.response_errors():
            return conn.execute(f"SELECT work_complete_checked(%s, %s, %s::jsonb, %s, %s) FROM {ENTER} _",
                                (tenant_id, scope_id, as_json(item), *principal.actor, gate)).fetchone()[0]
    with db.connection() as conn, db.domain_errors():
        return conn.execute(f"SELECT work_finish(%s, %s, %s, %s::jsonb, %s, %s) FROM {ENTER} _",
                            (tenant_id, scope_id, action, as_json(item), *principal.actor, gate)).fetchone()[0]


def finish_batch(principal: Principal, scope_id: str, action: str, items: list[dict[str, Any]]) -> list[dict]:
    """The batch extension: one call for many claimed messages, in one transaction. Each item answers
    {id, ok, state} or {id, ok: false, error: {code, message}}; one refused item spoils none of the others.
    A completion whose response does not fit its message's HITL spec answers VALIDATION_ERROR, with the
    spec's errors as details, and leaves that message claimed."""
    tenant_id = require(principal, ACTIONS[action])
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    ids = [_uuid_or_none(item.get("id")) for item in items]
    gate = guard(principal, tenant_id, scope_id, ACTIONS[action], messages=[str(i) for i in ids if i])
    with db.connection() as conn, db.domain_errors():
        return conn.execute(f"SELECT work_finish_batch(%s, %s, %s, %s::jsonb, %s::uuid[], %s, %s) FROM {ENTER} _",
                            (tenant_id, scope_id, action, as_json(items), ids, *principal.actor, gate)).fetchone()[0]


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    """An item's id as a UUID; one that is not names no message (its item answers not found)."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
