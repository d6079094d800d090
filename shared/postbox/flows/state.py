"""State shards: one per (query, source partition), rows keyed by opaque strings, JSON values.

Reads filter by exact keys, then a key prefix, then ripeness (`value.windowEnd` a JSON number at
or before a time), ANDed; rows come back ordered by key (byte order). `due` lists the partitions
holding such rows (what an idle flush visits, whoever folded them). Writes are the cycle's ordered
upserts and deletes; a delete carrying `expect` removes the row only if it still holds exactly that
value, else the cycle fails (`state_changed`). Keys are compared with COLLATE "C", so a prefix is an
index range.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg
from psycopg.types.json import Jsonb

from .. import db
from ..errors import Conflict, Invalid, NotFound
from ..partitioned import OWNER_KIND
from ..tenancy import Principal
from . import queries, sinks

MAX_KEY_BYTES = 4096
MAX_DUE = 1000
OP_TYPES = ("upsert", "delete")
_ANY = object()  # a delete without a precondition


_REFS = """
SELECT q.name, f.id::text, f.tenant_id::text, f.name, f.source_queue, f.sink_queue, f.config_hash
FROM log_partitions p
LEFT JOIN pq_queues q ON q.id = p.owner_id
LEFT JOIN flow_queries f ON f.id = %(query)s::uuid AND f.tenant_id = %(tenant)s
WHERE p.id = %(partition)s AND p.tenant_id = %(tenant)s AND p.owner_kind = %(kind)s
"""


class Refs(NamedTuple):
    partition: int
    queue_name: str | None            # the source queue's name (None: the partition has no queue)
    query: queries.QueryRow | None    # None: no such query of the caller's


def refs(conn: psycopg.Connection, tenant_id: str, partition_id: str, query_id: str) -> Refs:
    """The ownership gate (404 `not found`, code `ownership`, alike for another tenant's partition and a missing one)
    and what a cycle or a state read looks up besides, in one statement rather than three."""
    pid = str(partition_id)
    row = pid.isdigit() and conn.execute(_REFS, {
        "partition": int(pid), "tenant": tenant_id, "kind": OWNER_KIND,
        "query": queries.well_formed(query_id)}).fetchone()
    if not row:
        raise NotFound("not found", code="ownership")
    return Refs(int(pid), row[0], queries.QueryRow(*row[1:]) if row[1] is not None else None)


def _upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (byte order)."""
    last = ord(prefix[-1])
    return prefix[:-1] + chr(last + 1) if last < 0x10FFFF else None


def _where(query_id: str, partition: int | None, keys: list[str] | None, key_prefix: str | None,
           ripe_at_or_before: float | None) -> tuple[str, dict[str, Any]]:
    """The ANDed filters of a state read (one partition, or every partition when None)."""
    where = ["query_id = %(q)s"]
    params: dict[str, Any] = {"q": query_id}
    if partition is not None:
        where.append("partition_id = %(p)s")
        params["p"] = partition
    if keys:
        where.append("key = ANY(%(keys)s::text[])")
        params["keys"] = list(keys)
    if key_prefix:
        where.append("key >= %(lo)s")
        params["lo"] = key_prefix
        upper = _upper_bound(key_prefix)
        if upper is not None:
            where.append("key < %(hi)s")
            params["hi"] = upper
    if ripe_at_or_before is not None:
        where.append("jsonb_typeof(value -> 'windowEnd') = 'number'"
                     " AND (value ->> 'windowEnd')::numeric <= %(ripe)s::numeric")
        params["ripe"] = ripe_at_or_before
    return " AND ".join(where), params


def read(conn: psycopg.Connection, query_id: str, partition: int, *, keys: list[str] | None = None,
         key_prefix: str | None = None, ripe_at_or_before: float | None = None) -> list[dict[str, Any]]:
    where, params = _where(query_id, partition, keys, key_prefix, ripe_at_or_before)
    rows = conn.execute("SELECT key, value, updated_at FROM flow_state WHERE " + where + " ORDER BY key",
                        params).fetchall()
    return [{"key": k, "value": v, "updated_at": u.isoformat().replace("+00:00", "Z")} for k, v, u in rows]


def get(principal: Principal, query_id: str, partition_id: str, *, keys: list[str] | None = None,
        key_prefix: str | None = None, ripe_at_or_before: float | None = None) -> dict[str, Any]:
    """A state read: 404 for a partition not the caller's; another tenant's query reads as empty."""
    tenant = queries.require(principal, "read")
    if not query_id or not partition_id:
        raise Invalid("query_id and partition_id are required")
    with db.connection() as conn:  # two reads, no writes: no transaction to open and commit
        found = refs(conn, tenant, partition_id, query_id)
        if found.query is None:
            return {"success": True, "rows": []}
        rows = read(conn, found.query.id, found.partition, keys=keys, key_prefix=key_prefix,
                    ripe_at_or_before=ripe_at_or_before)
    return {"success": True, "rows": rows}


class StateOp(NamedTuple):
    kind: str                      # upsert | delete
    key: str
    value: Any = None
    expect: Any = _ANY             # a delete's precondition: the value the row must still hold


def check_ops(ops: list[Any]) -> list[StateOp]:
    """The ops, in order; any malformed op or other type fails the whole cycle."""
    out = []
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise Invalid(f"state_ops[{i}]: must be an object")
        kind, key = op.get("type"), op.get("key")
        if kind not in OP_TYPES:
            raise Invalid(f"state_ops[{i}]: unknown type {kind!r} (upsert or delete)")
        if not isinstance(key, str) or not key or len(key.encode()) > MAX_KEY_BYTES:
            raise Invalid(f"state_ops[{i}].key: must be a non-empty string of at most {MAX_KEY_BYTES} bytes")
        if kind == "upsert" and "value" not in op:
            raise Invalid(f"state_ops[{i}].value: required for an upsert")
        if "expect" in op and (kind != "delete" or op["expect"] is None):
            raise Invalid(f"state_ops[{i}].expect: a JSON value, on a delete only")
        out.append(StateOp(kind, key, op.get("value"), op.get("expect", _ANY)))
    return out


def _run_kind(op: StateOp) -> str:
    if op.kind == "delete" and op.expect is not _ANY:
        return "expect"
    return op.kind


def apply(conn: psycopg.Connection, query_id: str, partition: int, ops: list[StateOp]) -> int:
    """Apply ops in order, one statement per run of the same kind; returns how many were applied.
    Raises Conflict (`state_changed`) when a guarded delete finds its row changed or gone."""
    i = 0
    while i < len(ops):
        kind = _run_kind(ops[i])
        j = i
        while j < len(ops) and _run_kind(ops[j]) == kind:
            j += 1
        run = ops[i:j]
        if kind == "delete":
            conn.execute("DELETE FROM flow_state WHERE query_id = %s AND partition_id = %s AND key = ANY(%s::text[])",
                         (query_id, partition, [op.key for op in run]))
        elif kind == "expect":
            _delete_unchanged(conn, query_id, partition, run)
        else:
            last = {op.key: op.value for op in run}  # a key upserted twice in a run keeps its last value
            conn.execute(
                "INSERT INTO flow_state (query_id, partition_id, key, value)"
                " SELECT %s, %s, k, v FROM unnest(%s::text[], %s::jsonb[]) AS u(k, v)"
                " ON CONFLICT (query_id, partition_id, key) DO UPDATE SET value = excluded.value,"
                " updated_at = clock_timestamp()",
                (query_id, partition, list(last), [Jsonb(v) for v in last.values()]),
            )
        i = j
    return len(ops)


def _delete_unchanged(conn: psycopg.Connection, query_id: str, partition: int, run: list[StateOp]) -> None:
    want = {op.key: op.expect for op in run}
    deleted = conn.execute(
        "DELETE FROM flow_state s USING unnest(%s::text[], %s::jsonb[]) AS w(k, v)"
        " WHERE s.query_id = %s AND s.partition_id = %s AND s.key = w.k AND s.value = w.v",
        (list(want), [Jsonb(v) for v in want.values()], query_id, partition),
    ).rowcount
    if deleted != len(want):
        raise Conflict("state changed since it was read: a fold or another flush got there first; read it again",
                       code="state_changed")


def due(principal: Principal, query_id: str, *, consumer_group: str | None = None, key_prefix: str | None = None,
        ripe_at_or_before: float | None = None, limit: int = MAX_DUE) -> dict[str, Any]:
    """The source partitions holding rows that match the filters (an idle flush asks for ripe
    windows), in id order; with `consumer_group`, only those quiet for it (nothing left to consume,
    no live lease). Whoever folded the rows: this is how a runner finds windows it never saw."""
    tenant = queries.require(principal, "read")
    if not query_id:
        raise Invalid("query_id is required")
    if not 1 <= limit <= MAX_DUE:
        raise Invalid(f"limit: must be 1-{MAX_DUE}")
    with db.transaction() as conn:
        query = queries.find(conn, tenant, query_id)
        if query is None:
            return {"success": True, "partitions": []}
        where, params = _where(query.id, None, None, key_prefix, ripe_at_or_before)
        found = [r[0] for r in conn.execute(
            "SELECT DISTINCT partition_id FROM flow_state WHERE " + where + " ORDER BY 1", params)]
        if consumer_group:
            found = sinks.quiet_among(conn, found, consumer_group)
    return {"success": True, "partitions": [str(p) for p in found[:limit]]}
