"""Flows: the `/streams/v1` calls (`Flows`, `AsyncFlows`) and the SDK that writes streaming queries
with them: `Query` (the builder), `Runner` (pop, fold, commit one cycle per partition, idle flush),
`HttpClient` (the runner's calls over HTTP), windows and aggregates.

The builder, the fold and the runner import nothing but the standard library, so the server runs
them in process (hosted queries) without the HTTP client's dependencies: names are loaded on use.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Flows": "calls", "AsyncFlows": "calls", "FlowCalls": "calls", "HttpClient": "http",
    "Query": "query", "Runner": "runner", "CycleFailed": "runner",
    "Cron": "windows", "Session": "windows", "Sliding": "windows", "Tumbling": "windows",
    "avg_of": "aggregates", "count": "aggregates", "max_of": "aggregates", "min_of": "aggregates",
    "sum_of": "aggregates",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
