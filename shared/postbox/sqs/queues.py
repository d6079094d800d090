"""SQS's queue actions on Postbox queues: create, find, list, delete, purge, attributes, tags and
the dead-letter sources. Names are SQS's (a FIFO queue's ends in `.fifo`): a queue made through SQS
is a Postbox queue of that name, which the queues API lists and serves like its own."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import psycopg

from .. import db, tenancy
from ..errors import Conflict, Invalid, LimitExceeded, NotFound
from ..queues import engine, settings
from ..queues.catalog import scope
from ..tenancy import Principal
from . import attributes, errors, identity

_SQS_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
MAX_TAGS = 50


@dataclass(frozen=True)
class SqsQueue:
    id: int
    name: str
    fifo: bool
    attributes: dict[str, Any]
    visibility_timeout: int
    max_reads: int | None
    dead_letter_queue_id: int | None

    def setting(self, name: str) -> str:
        """An attribute as SQS answers it: as set, else SQS's default."""
        return str(self.attributes.get(name, attributes.default(name)))

    @functools.cached_property
    def delay(self) -> int:
        """DelaySeconds, read by every message a send names (so once per queue looked up)."""
        return int(self.setting("DelaySeconds"))

    @functools.cached_property
    def max_message_size(self) -> int:
        return int(self.setting("MaximumMessageSize"))


def check_name(name: object, fifo: bool) -> str:
    """A name SQS allows: 1-80 letters, digits, `-` or `_`, a FIFO queue's ending in `.fifo` (within
    the 80), or SQS's error saying which rule it breaks (an empty name is given, and too short:
    InvalidParameterValue, as SQS answers). The queues API's own rule for the names it makes is
    narrower; it sees and serves a queue of any name SQS made."""
    if not isinstance(name, str):
        raise errors.missing_parameter("QueueName")
    base = name[:-5] if name.endswith(".fifo") else name
    if not _SQS_NAME.fullmatch(base) or len(name) > 80:
        raise errors.invalid_queue_name()
    if name.endswith(".fifo") != fifo:  # a .fifo name is a FIFO queue's only, made with FifoQueue true
        raise errors.invalid_parameter("The name of a FIFO queue can only include alphanumeric characters, hyphens, "
                                       "or underscores, must end with .fifo suffix and be 1 to 80 in length."
                                       if fifo else "Can only include alphanumeric characters, hyphens, or "
                                       "underscores. 1 to 80 in length")
    return name


def find(conn: psycopg.Connection, principal: Principal, name: str, *, lock: bool = False) -> SqsQueue:
    row = conn.execute(
        "SELECT q.id, q.name, coalesce(s.fifo, false), coalesce(s.attributes, '{}'), q.visibility_timeout_sec,"
        " q.max_reads, q.dead_letter_queue_id FROM queues q LEFT JOIN sqs_queues s ON s.queue_id = q.id"
        " WHERE q.tenant_id = %(t)s AND q.project_id = %(p)s AND q.name = %(n)s"
        + (" FOR UPDATE OF q" if lock else ""),
        scope(principal, n=name),
    ).fetchone()
    if row is None:
        raise errors.no_queue()
    return SqsQueue(*row)


def _in_sqs_terms(run: Any) -> Any:
    """The queues domain's refusals as SQS's errors."""
    try:
        return run()
    except NotFound as e:
        raise errors.no_queue() if "dead-letter" not in e.message else errors.invalid_parameter(e.message) from None
    except LimitExceeded as e:
        raise errors.over_limit(e.message) from None
    except Invalid as e:
        raise errors.invalid_parameter(e.message) from None


def _redrive_changes(conn: psycopg.Connection, principal: Principal, name: str, fifo: bool,
                     policy: dict[str, Any] | None) -> dict[str, Any]:
    """RedrivePolicy as the Postbox queue's own settings: its dead-letter queue and max_reads."""
    if policy is None:
        return {"dead_letter_queue": None, "max_reads": None}
    text = policy["text"]
    try:
        target = identity.name_from_arn(principal.tenant_id, policy["deadLetterTargetArn"], "RedrivePolicy")
        dlq = find(conn, principal, target)
    except errors.SqsError as error:
        if error.kind != "QueueDoesNotExist":
            raise
        raise errors.invalid_redrive_policy(text, "Dead letter target does not exist.") from None
    if dlq.fifo != fifo:
        raise errors.invalid_redrive_policy(text, "The dead-letter queue of a FIFO queue must also be a FIFO queue, "
                                                  "and of a standard queue a standard queue.")
    if not attributes.allows_source(dlq.attributes.get("RedriveAllowPolicy"), identity.queue_arn(
            principal.tenant_id, name)):
        raise errors.invalid_redrive_policy(text, "The dead-letter queue's RedriveAllowPolicy does not allow this "
                                                  "queue.")
    return {"dead_letter_queue": target, "max_reads": policy["maxReceiveCount"]}


def _split(attrs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Postbox queue's own settings, SQS's attributes kept beside it) of checked attributes."""
    own: dict[str, Any] = {}
    if "VisibilityTimeout" in attrs:
        own["visibility_timeout_sec"] = attrs["VisibilityTimeout"]
    kept = {k: v for k, v in attrs.items() if k not in ("VisibilityTimeout", "RedrivePolicy")}
    return own, kept


def _differing(conn: psycopg.Connection, principal: Principal, queue: SqsQueue, given: Any,
               checked: dict[str, Any]) -> str | None:
    """The first attribute a CreateQueue names (in its order) whose value, as SQS reads it, differs
    from the existing queue's; None when all are the same."""
    for name in given:
        value = checked.get(name)
        if name == "FifoQueue":
            continue
        if name == "VisibilityTimeout":
            same = value == queue.visibility_timeout
        elif name == "RedrivePolicy":
            same = _same_redrive(conn, principal, queue, value)
        else:
            same = str(value) == queue.setting(name)
        if not same:
            return name
    return None


def _same_redrive(conn: psycopg.Connection, principal: Principal, queue: SqsQueue,
                  policy: dict[str, Any] | None) -> bool:
    if policy is None:
        return queue.dead_letter_queue_id is None
    try:
        target = find(conn, principal, identity.name_from_arn(principal.tenant_id, policy["deadLetterTargetArn"],
                                                               "RedrivePolicy"))
    except errors.SqsError:
        return False
    return target.id == queue.dead_letter_queue_id and policy["maxReceiveCount"] == queue.max_reads


RECENTLY_DELETED_S = 60  # SQS's: a queue's name is free again 60 seconds after its deletion


def _deleted_recently(conn: psycopg.Connection, principal: Principal, name: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqs_deleted_queues WHERE tenant_id = %(t)s AND project_id = %(p)s AND name = %(n)s"
        " AND deleted_at > clock_timestamp() - make_interval(secs => %(s)s)",
        scope(principal, n=name, s=RECENTLY_DELETED_S)).fetchone() is not None


def create(principal: Principal, base: str, name: Any, attrs: dict[str, Any], tags: dict[str, Any]) -> dict[str, Any]:
    """CreateQueue: a new Postbox queue (with SQS's view of it), or the URL of the same queue when
    one exists with the attributes asked (SQS's answer); other attributes are QueueNameExists, and a
    name deleted less than a minute ago is QueueDeletedRecently. A FIFO queue is made with FifoQueue
    true and a name ending in .fifo, both or neither."""
    tenancy.require(principal, "manage")
    attrs = attrs or {}
    fifo = isinstance(attrs, dict) and isinstance(attrs.get("FifoQueue"), str) and attrs["FifoQueue"].lower() == "true"
    check_name(name, fifo)
    checked = attributes.check(attrs, fifo=fifo, creating=True)
    tags = check_tags(tags or {})
    own, kept = _split(checked)
    # Kept even when it is the default: a queue whose SQS attributes hold it expires its waiting messages.
    kept.setdefault("MessageRetentionPeriod", attributes.NUMBERS["MessageRetentionPeriod"][2])
    for _ in range(2):  # made meanwhile by another request: found again, and answered as an existing queue
        try:
            return _create_or_find(principal, base, name, fifo, attrs, checked, dict(own), kept, tags)
        except _MadeMeanwhile:
            pass
    raise errors.queue_exists(f"A queue named {name} was created meanwhile.")


class _MadeMeanwhile(Exception):
    """Another request made the queue between this one's look for it and its insert."""


def _create_or_find(principal: Principal, base: str, name: str, fifo: bool, attrs: dict[str, Any],
                    checked: dict[str, Any], own: dict[str, Any], kept: dict[str, Any],
                    tags: dict[str, str]) -> dict[str, Any]:
    with db.transaction() as conn:
        try:
            existing = find(conn, principal, name)
        except errors.SqsError:
            existing = None
        if existing is not None:
            differing = "FifoQueue" if existing.fifo != fifo else _differing(conn, principal, existing, attrs, checked)
            if differing:
                raise errors.queue_exists_with(differing)
            return {"QueueUrl": identity.queue_url(base, principal.tenant_id, name)}
        if _deleted_recently(conn, principal, name):
            raise errors.deleted_recently()
        if "RedrivePolicy" in checked:
            own.update(_redrive_changes(conn, principal, name, fifo, checked["RedrivePolicy"]))
        try:
            qid = _in_sqs_terms(lambda: settings.insert_queue(conn, principal, name, own))
        except Conflict:
            raise _MadeMeanwhile from None
        conn.execute(
            "INSERT INTO sqs_queues (queue_id, fifo, attributes, tags) VALUES (%s, %s, %s, %s)",
            (qid, fifo, psycopg.types.json.Jsonb(kept), psycopg.types.json.Jsonb(tags)),
        )
    return {"QueueUrl": identity.queue_url(base, principal.tenant_id, name)}


def check_tags(tags: Any) -> dict[str, str]:
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise errors.invalid_parameter("Tags must be a map of strings to strings.")
    for k, v in tags.items():
        if not 1 <= len(k) <= 128:
            raise errors.invalid_parameter("Tag keys must be between 1 and 128 characters in length.")
        if len(v) > 256:
            raise errors.invalid_parameter("A tag value is at most 256 characters.")
    return tags


def get_url(principal: Principal, base: str, name: Any) -> dict[str, Any]:
    tenancy.require(principal, "read")
    if not isinstance(name, str) or not name:
        raise errors.missing_parameter("QueueName")
    with db.transaction() as conn:
        find(conn, principal, name)
    return {"QueueUrl": identity.queue_url(base, principal.tenant_id, name)}


def list_urls(principal: Principal, base: str, prefix: Any, max_results: Any, next_token: Any) -> dict[str, Any]:
    """ListQueues: names in order, from after `next_token` (the last name of the previous page)."""
    tenancy.require(principal, "read")
    if prefix is not None and not isinstance(prefix, str):
        raise errors.invalid_parameter("QueueNamePrefix must be a string.")
    if max_results is not None and (not isinstance(max_results, int) or isinstance(max_results, bool)
                                    or not 1 <= max_results <= 1000):
        raise errors.invalid_parameter("Value for parameter MaxResults is invalid. Reason: MaxResults must be an "
                                       "integer between 1 and 1000.")
    if next_token is not None and not isinstance(next_token, str):
        raise errors.invalid_parameter("Invalid NextToken value.")
    limit = max_results or 1000
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT name FROM queues WHERE tenant_id = %(t)s AND project_id = %(p)s"
            " AND starts_with(name, %(prefix)s) AND name COLLATE \"C\" > %(after)s"
            " ORDER BY name COLLATE \"C\" LIMIT %(n)s",
            scope(principal, prefix=prefix or "", after=next_token or "", n=limit + 1),
        ).fetchall()
    found = [r[0] for r in rows]
    out: dict[str, Any] = {"QueueUrls": [identity.queue_url(base, principal.tenant_id, n) for n in found[:limit]]}
    if max_results is not None and len(found) > limit:
        out["NextToken"] = found[limit - 1]
    return out


def delete(principal: Principal, name: str) -> dict[str, Any]:
    """DeleteQueue, noting when the name was let go (CreateQueue refuses it for RECENTLY_DELETED_S)."""
    tenancy.require(principal, "manage")
    try:
        with db.transaction() as conn:
            settings.remove_queue(conn, principal, name)
            conn.execute(
                "INSERT INTO sqs_deleted_queues AS d (tenant_id, project_id, name, deleted_at)"
                " VALUES (%(t)s, %(p)s, %(n)s, clock_timestamp())"
                " ON CONFLICT (project_id, name) DO UPDATE SET deleted_at = excluded.deleted_at",
                scope(principal, n=name))
            # The tenant's notes past their minute go with it (a few rows: names deleted in the last minute).
            conn.execute("DELETE FROM sqs_deleted_queues WHERE tenant_id = %(t)s"
                         " AND deleted_at <= clock_timestamp() - make_interval(secs => %(s)s)",
                         scope(principal, s=RECENTLY_DELETED_S))
    except NotFound:
        raise errors.no_queue() from None
    except Conflict as e:
        raise errors.invalid_parameter(f"{e.message} Remove that queue's RedrivePolicy first.") from None
    return {}


PURGE_EVERY_S = 60  # SQS's: one PurgeQueue per queue every 60 seconds


def purge(principal: Principal, name: str) -> dict[str, Any]:
    """Delete every message of the queue (visible, in flight or delayed), at most once per PURGE_EVERY_S
    (PurgeQueueInProgress). A FIFO queue forgets its deduplication ids and receive attempts with them,
    as SQS does: a message sent again after a purge is a new message."""
    tenancy.require(principal, "manage")
    with db.transaction() as conn:
        queue_id = find(conn, principal, name, lock=True).id
        # The purge is noted only when the last one is PURGE_EVERY_S old (no row back: refused, and
        # the transaction, the note included, rolls back).
        if conn.execute(
            "INSERT INTO sqs_purges AS p (queue_id, purged_at) VALUES (%s, clock_timestamp())"
            " ON CONFLICT (queue_id) DO UPDATE SET purged_at = excluded.purged_at"
            " WHERE p.purged_at <= clock_timestamp() - %s * interval '1 second' RETURNING true",
            (queue_id, PURGE_EVERY_S)).fetchone() is None:
            raise errors.purge_in_progress(name)
        engine.purge(conn, queue_id)
        conn.execute("WITH ids AS (DELETE FROM sqs_dedup WHERE queue_id = %(q)s)"
                     " DELETE FROM sqs_receive_attempts WHERE queue_id = %(q)s", {"q": queue_id})
    return {}


def get_attributes(principal: Principal, name: str, wanted: Any) -> dict[str, Any]:
    tenancy.require(principal, "read")
    if wanted is None:
        wanted = []
    if not isinstance(wanted, list) or not all(isinstance(w, str) for w in wanted):
        raise errors.invalid_parameter("AttributeNames must be a list of attribute names.")
    for w in wanted:
        if w != "All" and w not in attributes.ALL:
            raise errors.unknown_attribute(w)
    with db.transaction() as conn:
        queue = find(conn, principal, name)
        names_wanted = [a for a in attributes.ALL if "All" in wanted or a in wanted]
        if not queue.fifo:
            names_wanted = [a for a in names_wanted if a not in attributes.FIFO_ONLY and a != "FifoQueue"]
        if not names_wanted:
            return {}
        visible, in_flight, delayed = engine.state_counts(conn, queue.id)
        row = conn.execute(
            "SELECT extract(epoch FROM q.created_at)::bigint, extract(epoch FROM q.updated_at)::bigint, d.name"
            " FROM queues q LEFT JOIN queues d ON d.id = q.dead_letter_queue_id WHERE q.id = %s", (queue.id,),
        ).fetchone()
    values: dict[str, Any] = {
        "ApproximateNumberOfMessages": visible, "ApproximateNumberOfMessagesNotVisible": in_flight,
        "ApproximateNumberOfMessagesDelayed": delayed, "CreatedTimestamp": row[0], "LastModifiedTimestamp": row[1],
        "QueueArn": identity.queue_arn(principal.tenant_id, name), "VisibilityTimeout": queue.visibility_timeout,
        "FifoQueue": "true" if queue.fifo else None,
    }
    values.update(attributes.DEFAULTS)
    values.update(queue.attributes)
    if not values["KmsMasterKeyId"]:  # the KMS attributes are a KMS-encrypted queue's only
        values["KmsDataKeyReusePeriodSeconds"] = None
    if row[2] is not None and queue.max_reads is not None:
        values["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": identity.queue_arn(principal.tenant_id, row[2]),
                                              "maxReceiveCount": queue.max_reads}, separators=(",", ":"))
    out = {k: str(values[k]) for k in names_wanted if values.get(k) not in (None, "")}
    return {"Attributes": out} if out else {}


def set_attributes(principal: Principal, name: str, attrs: Any) -> dict[str, Any]:
    tenancy.require(principal, "manage")
    if not attrs:
        raise errors.missing_parameter("Attributes")
    with db.transaction() as conn:
        if isinstance(attrs, dict) and "RedrivePolicy" in attrs:  # before the queue's row (the lock order)
            settings.hold_dead_letter_links(conn, principal)
        queue = find(conn, principal, name, lock=True)
        checked = attributes.check(attrs, fifo=queue.fifo, creating=False, current=queue.attributes)
        own, kept = _split(checked)
        if "RedrivePolicy" in checked:
            own.update(_redrive_changes(conn, principal, name, queue.fifo, checked["RedrivePolicy"]))
        if own:
            _in_sqs_terms(lambda: settings.change_queue(conn, principal, name, own))
        keep(conn, queue.id, kept)
    return {}


def keep(conn: psycopg.Connection, queue_id: int, kept: dict[str, Any]) -> None:
    """SQS's attributes `kept` beside a queue (merged over those it had; a queues-API queue gets its
    SQS row here), the queue marked modified."""
    conn.execute(
        "INSERT INTO sqs_queues AS s (queue_id, fifo, attributes) VALUES (%(q)s, false, %(a)s)"
        " ON CONFLICT (queue_id) DO UPDATE SET attributes = s.attributes || excluded.attributes",
        {"q": queue_id, "a": psycopg.types.json.Jsonb(kept)},
    )
    conn.execute("UPDATE queues SET updated_at = clock_timestamp() WHERE id = %s", (queue_id,))


def tag(principal: Principal, name: str, tags: Any) -> dict[str, Any]:
    tenancy.require(principal, "manage")
    tags = check_tags(tags)
    if not tags:
        raise errors.missing_parameter("Tags")
    with db.transaction() as conn:
        queue = find(conn, principal, name, lock=True)
        row = conn.execute(
            "INSERT INTO sqs_queues AS s (queue_id, fifo, tags) VALUES (%(q)s, false, %(t)s)"
            " ON CONFLICT (queue_id) DO UPDATE SET tags = s.tags || excluded.tags RETURNING tags",
            {"q": queue.id, "t": psycopg.types.json.Jsonb(tags)},
        ).fetchone()
        if len(row[0]) > MAX_TAGS:
            raise errors.invalid_parameter(f"A queue has at most {MAX_TAGS} tags.")
    return {}


def untag(principal: Principal, name: str, keys: Any) -> dict[str, Any]:
    tenancy.require(principal, "manage")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise errors.missing_parameter("TagKeys")
    with db.transaction() as conn:
        queue = find(conn, principal, name, lock=True)
        conn.execute("UPDATE sqs_queues SET tags = tags - %s::text[] WHERE queue_id = %s", (keys, queue.id))
    return {}


def list_tags(principal: Principal, name: str) -> dict[str, Any]:
    tenancy.require(principal, "read")
    with db.transaction() as conn:
        queue = find(conn, principal, name)
        row = conn.execute("SELECT tags FROM sqs_queues WHERE queue_id = %s", (queue.id,)).fetchone()
    return {"Tags": row[0]} if row and row[0] else {}


def dead_letter_sources(principal: Principal, base: str, name: str, max_results: Any, next_token: Any) -> dict:
    tenancy.require(principal, "read")
    if max_results is not None and (not isinstance(max_results, int) or isinstance(max_results, bool)
                                    or not 1 <= max_results <= 1000):
        raise errors.invalid_parameter("MaxResults must be an integer between 1 and 1000.")
    limit = max_results or 1000
    with db.transaction() as conn:
        queue = find(conn, principal, name)
        rows = conn.execute(
            "SELECT name FROM queues WHERE dead_letter_queue_id = %s AND name COLLATE \"C\" > %s"
            " ORDER BY name COLLATE \"C\" LIMIT %s",
            (queue.id, next_token if isinstance(next_token, str) else "", limit + 1),
        ).fetchall()
    found = [r[0] for r in rows]
    out: dict[str, Any] = {"queueUrls": [identity.queue_url(base, principal.tenant_id, n) for n in found[:limit]]}
    if max_results is not None and len(found) > limit:
        out["NextToken"] = found[limit - 1]
    return out
