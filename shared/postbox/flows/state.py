"""State shards: one per (query, source partition), rows keyed by opaque strings, JSON values.

Reads filter by exact keys, then a key prefix, then ripeness (`value.windowEnd` a JSON number at
or before a time), ANDed; rows come back ordered by key (byte order). Writes are the cycle's
ordered upserts and deletes. Keys are compared with COLLATE "C", so a prefix is an index range.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .. import db
from ..errors import Invalid, NotFound
from ..partitioned import consume
from ..tenancy import Principal
from . import queries

MAX_KEY_BYTES = 4096
OP_TYPES = ("upsert", "delete")


def partition_ref(conn: psycopg.Connection, tenant_id: str, partition_id: str) -> int:
    """The ownership gate: the source partition's id if it is the caller's, else 404 `not found`
    (the same answer for another tenant's partition and a missing one)."""
    try:
        consume.check_partition(conn, tenant_id, partition_id)
    except NotFound:
        raise NotFound("not found", code="ownership") from None
    return int(partition_id)


def _upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (byte order)."""
    last = ord(prefix[-1])
    return prefix[:-1] + chr(last + 1) if last < 0x10FFFF else None


def read(conn: psycopg.Connection, query_id: str, partition: int, *, keys: list[str] | None = None,
         key_prefix: str | None = None, ripe_at_or_before: float | None = None) -> list[dict[str, Any]]:
    where = ["query_id = %(q)s", "partition_id = %(p)s"]
    params: dict[str, Any] = {"q": query_id, "p": partition}
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
    rows = conn.execute(
        "SELECT key, value, updated_at FROM flow_state WHERE " + " AND ".join(where) + " ORDER BY key", params
    ).fetchall()
    return [{"key": k, "value": v, "updated_at": u.isoformat().replace("+00:00", "Z")} for k, v, u in rows]


def get(principal: Principal, query_id: str, partition_id: str, *, keys: list[str] | None = None,
        key_prefix: str | None = None, ripe_at_or_before: float | None = None) -> dict[str, Any]:
    """A state read: 404 for a partition not the caller's; another tenant's query reads as empty."""
    tenant = queries.require(principal, "read")
    if not query_id or not partition_id:
        raise Invalid("query_id and partition_id are required")
    with db.transaction() as conn:
        partition = partition_ref(conn, tenant, partition_id)
        query = queries.find(conn, tenant, query_id)
        if query is None:
            return {"success": True, "rows": []}
        rows = read(conn, query.id, partition, keys=keys, key_prefix=key_prefix,
                    ripe_at_or_before=ripe_at_or_before)
    return {"success": True, "rows": rows}


def check_ops(ops: list[Any]) -> list[tuple[str, str, Any]]:
    """(type, key, value) per op, in order; any malformed op or other type fails the whole cycle."""
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
        out.append((kind, key, op.get("value")))
    return out


def apply(conn: psycopg.Connection, query_id: str, partition: int, ops: list[tuple[str, str, Any]]) -> int:
    """Apply ops in order, one statement per run of the same type; returns how many were applied."""
    i = 0
    while i < len(ops):
        kind = ops[i][0]
        j = i
        while j < len(ops) and ops[j][0] == kind:
            j += 1
        run = ops[i:j]
        if kind == "delete":
            conn.execute("DELETE FROM flow_state WHERE query_id = %s AND partition_id = %s AND key = ANY(%s::text[])",
                         (query_id, partition, [k for _, k, _ in run]))
        else:
            last = {k: v for _, k, v in run}  # a key upserted twice in a run keeps its last value
            conn.execute(
                "INSERT INTO flow_state (query_id, partition_id, key, value)"
                " SELECT %s, %s, k, v FROM unnest(%s::text[], %s::jsonb[]) AS u(k, v)"
                " ON CONFLICT (query_id, partition_id, key) DO UPDATE SET value = excluded.value,"
                " updated_at = clock_timestamp()",
                (query_id, partition, list(last), [Jsonb(v) for v in last.values()]),
            )
        i = j
    return len(ops)


def partitions_with_state(conn: psycopg.Connection, query_id: str) -> list[int]:
    """Source partitions holding state for a query (what an idle-flush sweep visits)."""
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT partition_id FROM flow_state WHERE query_id = %s ORDER BY 1", (query_id,))]
