"""Hosted queries: the flows agent runs them as a scheduled function, so windows close and idle
partitions flush even when no worker is up.

A hosted query is a factory (`module:function` returning a `Query`) importable by the functions'
code. Each sweep builds it, registers it (a changed chain is recorded as the row's error, never
reset silently), folds what is waiting for a bounded time, then idle-flushes every quiet partition
holding ripe windows. Sweeps, runners and other sweeps of the same query may overlap: leases guard
the folds, and a flush commits only while its partition is quiet and its rows are as it read them
(see `cycle`), so a window is emitted by exactly one of them.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from postbox_client.flows.query import Query
from postbox_client.flows.runner import Runner

from .. import db
from ..errors import NotFound
from ..tenancy import Principal
from . import queries
from .local_client import LocalClient


def load(factory: str) -> Query:
    module, _, attr = factory.partition(":")
    built = getattr(importlib.import_module(module), attr)()
    if not isinstance(built, Query):
        raise TypeError(f"{factory} did not return a Query")
    return built


def host(principal: Principal, factory: str, *, reset: bool = False) -> dict[str, Any]:
    """Register the factory's query for the caller's tenant and mark it hosted."""
    query = load(factory)
    answer = queries.register(principal, query.name, query.source, query.sink_queue, query.config_hash(), reset)
    with db.transaction() as conn:
        conn.execute("INSERT INTO flow_hosted (query_id, factory) VALUES (%s, %s)"
                     " ON CONFLICT (query_id) DO UPDATE SET factory = excluded.factory, enabled = true",
                     (answer["query_id"], factory))
    return {**answer, "factory": factory}


def host_for_tenant(tenant: str, factory: str, *, reset: bool = False) -> dict[str, Any]:
    """`host` for an operator (the CLI): `tenant` is a tenant's name or id."""
    with db.transaction() as conn:
        row = conn.execute("SELECT id::text FROM tenants WHERE name = %s OR id::text = %s", (tenant, tenant)).fetchone()
    if row is None:
        raise NotFound(f"no tenant {tenant!r}")
    return host(_agent(row[0]), factory, reset=reset)


def unhost(query_id: str) -> None:
    with db.transaction() as conn:
        conn.execute("UPDATE flow_hosted SET enabled = false WHERE query_id = %s", (query_id,))


def _agent(tenant_id: str) -> Principal:
    return Principal(tenant_id=tenant_id, project_id=None, role="write", key_id="flows-agent")


def run_one(query_id: str, tenant_id: str, factory: str, *, budget_s: float,
            now_ms: Callable[[], int]) -> dict[str, int]:
    """One bounded pass of one hosted query: fold what waits, then flush ripe windows."""
    runner = Runner(load(factory), LocalClient(_agent(tenant_id)), wait_ms=0, clock=lambda: now_ms() / 1000)
    runner.start()
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline and runner.run_once(wait_ms=0):
        pass
    runner.flush_idle(force=True)
    return {"messages": runner.stats["messages"], "emitted": runner.stats["emitted"]}


def sweep(*, budget_s: float = 20.0, now_ms: Callable[[], int] | None = None) -> dict[str, int]:
    """Run every enabled hosted query once, within `budget_s` overall."""
    clock = now_ms or (lambda: int(time.time() * 1000))
    with db.transaction() as conn:
        rows = conn.execute("SELECT h.query_id::text, q.tenant_id::text, h.factory FROM flow_hosted h"
                            " JOIN flow_queries q ON q.id = h.query_id WHERE h.enabled ORDER BY h.last_run_at"
                            " NULLS FIRST").fetchall()
    totals = {"queries": 0, "messages": 0, "emitted": 0, "errors": 0}
    deadline = time.monotonic() + budget_s
    for query_id, tenant_id, factory in rows:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        error = None
        try:
            done = run_one(query_id, tenant_id, factory, budget_s=left, now_ms=clock)
            totals["messages"] += done["messages"]
            totals["emitted"] += done["emitted"]
        except Exception as failed:  # one broken query must not stop the others
            error = f"{type(failed).__name__}: {failed}"[:1000]
            totals["errors"] += 1
        totals["queries"] += 1
        with db.transaction() as conn:
            conn.execute("UPDATE flow_hosted SET last_run_at = clock_timestamp(), last_error = %s"
                         " WHERE query_id = %s", (error, query_id))
    return totals
