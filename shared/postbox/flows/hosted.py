"""Hosted queries' rows: which factory (`module:function`) a registered query is built from, whether
it is enabled, when it last ran and its last error.

The flows agent builds and runs them with the SDK (`functions.agents.flows_runner`); the domain only
keeps their state, and never imports the client package that holds the SDK.
"""

from __future__ import annotations

from typing import Any

from .. import db
from ..tenancy import Principal
from . import queries


def host(principal: Principal, factory: str, *, name: str, source_queue: str, sink_queue: str | None,
         config_hash: str, reset: bool = False) -> dict[str, Any]:
    """Register the factory's query (its name, queues and chain's hash) for the caller's tenant and
    mark it hosted."""
    answer = queries.register(principal, name, source_queue, sink_queue, config_hash, reset)
    with db.transaction() as conn:
        conn.execute("INSERT INTO flow_hosted (query_id, factory) VALUES (%s, %s)"
                     " ON CONFLICT (query_id) DO UPDATE SET factory = excluded.factory, enabled = true",
                     (answer["query_id"], factory))
    return {**answer, "factory": factory}


def unhost(query_id: str) -> None:
    with db.transaction() as conn:
        conn.execute("UPDATE flow_hosted SET enabled = false WHERE query_id = %s", (query_id,))


def agent(tenant_id: str) -> Principal:
    return Principal(tenant_id=tenant_id, project_id=None, role="write", key_id="flows-agent")


def enabled() -> list[tuple[str, str, str]]:
    """(query id, tenant id, factory) of every enabled hosted query, the longest unrun first."""
    with db.transaction() as conn:
        return conn.execute("SELECT h.query_id::text, q.tenant_id::text, h.factory FROM flow_hosted h"
                            " JOIN flow_queries q ON q.id = h.query_id WHERE h.enabled ORDER BY h.last_run_at"
                            " NULLS FIRST").fetchall()


def ran(query_id: str, error: str | None) -> None:
    """Record a run of the query (and its error, None when it went well)."""
    with db.transaction() as conn:
        conn.execute("UPDATE flow_hosted SET last_run_at = clock_timestamp(), last_error = %s"
                     " WHERE query_id = %s", (error, query_id))
