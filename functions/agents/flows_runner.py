"""Hosted flows queries, run with the SDK: the flows agent runs them as a scheduled function, so
windows close and idle partitions flush even when no worker is up.

A hosted query is a factory (`module:function` returning a `Query` of the SDK, `postbox_client.flows`)
importable by the functions' code. Each sweep builds it, registers it (a changed chain is recorded as
the row's error, never reset silently), folds what is waiting for a bounded time, then idle-flushes
every quiet partition holding ripe windows. Sweeps, runners and other sweeps of the same query may
overlap: leases guard the folds, and a flush commits only while its partition is quiet and its rows
are as it read them (see `postbox.flows.cycle`), so a window is emitted by exactly one of them.

The SDK runs here, beside the agent, and not in the domain: `postbox.flows.hosted` keeps the hosted
queries' rows (which factory, enabled, the last run and its error) and `postbox.flows.local_client`
the runner's calls in process; the domain never imports the client package.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

from postbox import tenancy
from postbox.flows import hosted
from postbox.flows.local_client import LocalClient
from postbox.tenancy import Principal
from postbox_client.flows.query import Query
from postbox_client.flows.runner import Runner


def load(factory: str) -> Query:
    module, _, attr = factory.partition(":")
    built = getattr(importlib.import_module(module), attr)()
    if not isinstance(built, Query):
        raise TypeError(f"{factory} did not return a Query")
    return built


def host(principal: Principal, factory: str, *, reset: bool = False) -> dict[str, Any]:
    """Register the factory's query for the caller's tenant and mark it hosted."""
    query = load(factory)
    return hosted.host(principal, factory, name=query.name, source_queue=query.source,
                       sink_queue=query.sink_queue, config_hash=query.config_hash(), reset=reset)


def host_for_tenant(tenant: str, factory: str, *, reset: bool = False) -> dict[str, Any]:
    """`host` for an operator (the CLI): `tenant` is a tenant's name or id, hosted on its cell."""
    with tenancy.on_tenant(tenant) as tenant_id:
        return host(hosted.agent(tenant_id), factory, reset=reset)


def run_one(query_id: str, tenant_id: str, factory: str, *, budget_s: float,
            now_ms: Callable[[], int]) -> dict[str, int]:
    """One bounded pass of one hosted query: fold what waits, then flush ripe windows."""
    runner = Runner(load(factory), LocalClient(hosted.agent(tenant_id)), wait_ms=0, clock=lambda: now_ms() / 1000)
    runner.start()
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline and runner.run_once(wait_ms=0):
        pass
    runner.flush_idle(force=True)
    return {"messages": runner.stats["messages"], "emitted": runner.stats["emitted"]}


def sweep(*, budget_s: float = 20.0, now_ms: Callable[[], int] | None = None) -> dict[str, int]:
    """Run every enabled hosted query once, within `budget_s` overall."""
    clock = now_ms or (lambda: int(time.time() * 1000))
    totals = {"queries": 0, "messages": 0, "emitted": 0, "errors": 0}
    deadline = time.monotonic() + budget_s
    for query_id, tenant_id, factory in hosted.enabled():
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
        hosted.ran(query_id, error)
    return totals
