"""Query registration: idempotent on (tenant, name), where a changed operator chain is caught.

Outcomes: a new name is inserted (`fresh`), after the quota gate and within the plan's flows; the
same hash updates the queues and keeps the state; a different hash is a 409 naming the query unless
`reset`, which deletes every state row of the query and stores the new hash.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import psycopg

from .. import db, limits, names, tenancy
from ..errors import Conflict, Invalid
from ..partitioned.produce import uuid7
from ..tenancy import Principal
from . import quotas, sinks


class QueryRow(NamedTuple):
    id: str
    tenant_id: str
    name: str
    source_queue: str
    sink_queue: str | None
    config_hash: str


def require(principal: Principal, need: str) -> str:
    """The caller's tenant, if its role allows `need` (read for state reads, write otherwise)."""
    return tenancy.require(principal, need, what="flows")


_COLUMNS = "id::text, tenant_id::text, name, source_queue, sink_queue, config_hash"


def well_formed(query_id: Any) -> str | None:
    """The id as text when it can name a query (a UUID), else None: nothing to look up."""
    try:
        uuid.UUID(str(query_id))
    except ValueError:
        return None
    return str(query_id)


def find(conn: psycopg.Connection, tenant_id: str, query_id: str) -> QueryRow | None:
    """The tenant's query by id; None for an unknown id, a malformed one or another tenant's."""
    if well_formed(query_id) is None:
        return None
    row = conn.execute(f"SELECT {_COLUMNS} FROM flow_queries WHERE id = %s AND tenant_id = %s",
                       (str(query_id), tenant_id)).fetchone()
    return QueryRow(*row) if row else None


def by_name(conn: psycopg.Connection, tenant_id: str, name: str, *, lock: bool = False) -> QueryRow | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM flow_queries WHERE tenant_id = %s AND name = %s"
                       + (" FOR UPDATE" if lock else ""), (tenant_id, name)).fetchone()
    return QueryRow(*row) if row else None


def register(principal: Principal, name: str, source_queue: str, sink_queue: str | None, config_hash: str,
             reset: bool = False) -> dict[str, Any]:
    tenant = require(principal, "write")
    if not config_hash:
        raise Invalid("config_hash is required")
    names.FLOW_QUERY.check(name, "name")
    if not source_queue:
        raise Invalid("source_queue is required")
    names.PARTITIONED_QUEUE.check(source_queue, "source_queue")
    if sink_queue:
        names.PARTITIONED_QUEUE.check(sink_queue, "sink_queue")
    sink = sink_queue or None
    fresh = did_reset = False
    with db.transaction() as conn:
        found = by_name(conn, tenant, name, lock=True)
        if found is None:
            quotas.check_new_query(conn, tenant)
            limits.check(conn, tenant, limits.FLOWS)
            inserted = conn.execute(
                "INSERT INTO flow_queries (id, tenant_id, name, source_queue, sink_queue, config_hash)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant_id, name) DO NOTHING RETURNING id::text",
                (uuid7(), tenant, name, source_queue, sink, config_hash),
            ).fetchone()
            if inserted is not None:
                sinks.source_defaults(conn, tenant, source_queue)
                return _answer(inserted[0], name, config_hash, fresh=True, reset=False)
            found = by_name(conn, tenant, name, lock=True)  # registered concurrently: an existing name now
            assert found is not None
        if found.config_hash != config_hash and not reset:
            raise Conflict(
                f"config_hash mismatch: query {name!r} is registered with a different config_hash; re-register"
                " with reset: true to delete its state and use the new operator chain (the SDK:"
                " Runner(query, client, reset=True))",
                code="config_changed", query_id=found.id, name=name,
            )
        if reset:
            conn.execute("DELETE FROM flow_state WHERE query_id = %s", (found.id,))
            did_reset = True
        conn.execute(
            "UPDATE flow_queries SET source_queue = %s, sink_queue = %s, config_hash = %s,"
            " updated_at = clock_timestamp() WHERE id = %s",
            (source_queue, sink, config_hash, found.id),
        )
        sinks.source_defaults(conn, tenant, source_queue)
    return _answer(found.id, name, config_hash, fresh=fresh, reset=did_reset)


def _answer(query_id: str, name: str, config_hash: str, *, fresh: bool, reset: bool) -> dict[str, Any]:
    return {"success": True, "query_id": query_id, "name": name, "config_hash": config_hash, "fresh": fresh,
            "reset": reset}
