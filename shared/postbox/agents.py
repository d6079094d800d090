"""The one agent-run recorder: every system agent's runs counted the same way.

`recorded(name)` wraps an agent's run: it marks the agent running, times the run, and adds to its
row of `agent_runs` (runs, processed, errors, last run, duration, last error). What a run processed
is the sum of the integer values of the dict it returns (or the integer it returns). A failure to
record never fails the agent; an agent's own failure is recorded, then raised again.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from . import cells, db

log = logging.getLogger("postbox.agents")
F = TypeVar("F", bound=Callable[..., Any])

_START = """
INSERT INTO agent_runs AS a (agent, running_since) VALUES (%s, clock_timestamp())
ON CONFLICT (agent) DO UPDATE SET running_since = clock_timestamp()
"""

_FINISH = """
INSERT INTO agent_runs AS a (agent, total_runs, total_processed, total_errors, last_run_at, last_run_duration_ms,
                             last_error, last_error_at)
VALUES (%(a)s, 1, %(n)s, %(e)s, clock_timestamp(), %(ms)s, %(err)s, CASE WHEN %(e)s = 1 THEN clock_timestamp() END)
ON CONFLICT (agent) DO UPDATE SET
    total_runs = a.total_runs + 1,
    total_processed = a.total_processed + excluded.total_processed,
    total_errors = a.total_errors + excluded.total_errors,
    last_run_at = excluded.last_run_at,
    last_run_duration_ms = excluded.last_run_duration_ms,
    last_error = coalesce(excluded.last_error, a.last_error),
    last_error_at = coalesce(excluded.last_error_at, a.last_error_at),
    running_since = NULL
"""

_STATUS = """
SELECT agent, total_runs, total_processed, total_errors, last_run_at, last_run_duration_ms, last_error,
       last_error_at, running_since FROM agent_runs WHERE agent = ANY(%s)
"""


def processed(result: Any, key: str | None = None) -> int:
    """How many items a run processed: an int, the result dict's `key`, or the sum of its integer values."""
    if key is not None and isinstance(result, dict):
        return processed(result.get(key, 0))
    if isinstance(result, bool):
        return 0
    if isinstance(result, int):
        return result
    if isinstance(result, dict):
        return sum(v for v in result.values() if isinstance(v, int) and not isinstance(v, bool))
    return 0


def _write(statement: str, params: Any) -> None:
    try:
        with db.connection() as conn:
            conn.execute(statement, params)
    except Exception:  # recording must never be why an agent fails
        log.exception("could not record an agent run")


def failure_kind(error: BaseException) -> str:
    """What `GET /system-agents` shows of an agent's failure: its kind, and a database error's
    SQLSTATE. Never its text: an agent works for every tenant of its cell, so the text may name
    another tenant's data (a value, a URL, a name); it is in the agent's log line, for operators."""
    sqlstate = getattr(error, "sqlstate", None)
    kind = type(error).__name__
    return f"{kind} (SQLSTATE {sqlstate})" if isinstance(sqlstate, str) else kind


def recorded(name: str, *, count: str | None = None) -> Callable[[F], F]:
    """Decorate an agent's handler so each of its runs lands in `agent_runs` under `name` (`count`
    names the result's key that says what it processed, when the sum of its numbers would not).

    The handler runs once on every cell, each run recorded in that cell's `agent_runs`; an event
    that names its `cell` (a dispatch a send started) runs on that cell only. A cell whose run
    fails does not stop the others: the first failure is raised once every cell has run."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            event = args[0] if args and isinstance(args[0], dict) else {}
            named = event.get("cell")
            if isinstance(named, str) and cells.several():
                with cells.use(named):
                    return _run_here(fn, args, kwargs)
            results, failure = [], None
            for _ in cells.each():
                try:
                    results.append(_run_here(fn, args, kwargs))
                except Exception as e:  # noqa: BLE001 - raised below, after the other cells ran
                    failure = failure or e
            if failure is not None:
                raise failure
            return results[0] if len(results) == 1 else _summed(results)

        def _run_here(fn: F, args: Any, kwargs: Any) -> Any:
            _write(_START, (name,))
            started = time.monotonic()
            try:
                result = fn(*args, **kwargs)
            except Exception as e:
                ms = int((time.monotonic() - started) * 1000)
                _write(_FINISH, {"a": name, "n": 0, "e": 1, "ms": ms, "err": failure_kind(e)})
                raise
            ms = int((time.monotonic() - started) * 1000)
            _write(_FINISH, {"a": name, "n": processed(result, count), "e": 0, "ms": ms, "err": None})
            return result

        return run  # type: ignore[return-value]

    return wrap


def _summed(results: list[Any]) -> Any:
    """Every cell's result as one: numbers added up by key (a dict), or added (an int)."""
    if all(isinstance(r, dict) for r in results):
        total: dict[str, Any] = {}
        for result in results:
            for key, value in result.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    total[key] = total.get(key, 0) + value
                else:
                    total.setdefault(key, value)
        return total
    if all(isinstance(r, int) and not isinstance(r, bool) for r in results):
        return sum(results)
    return results


def status(names: Iterable[str]) -> list[dict[str, Any]]:
    """Each named agent's record, in the order given; an agent that never ran shows zeros."""
    names = list(names)
    with db.connection() as conn:
        rows = {r[0]: r for r in conn.execute(_STATUS, (names,)).fetchall()}
    out = []
    for name in names:
        row = rows.get(name)
        if row is None:
            out.append({"name": name, "status": "never_run", "total_runs": 0, "total_processed": 0,
                        "total_errors": 0, "last_run_at": None, "last_run_duration_ms": None, "last_error": None})
            continue
        _, runs, done, errs, last_at, ms, last_error, error_at, running = row
        if running is not None:
            state = "running"
        elif error_at is not None and last_at is not None and error_at >= last_at:
            state = "error"
        else:
            state = "healthy" if runs else "never_run"
        out.append({"name": name, "status": state, "total_runs": runs, "total_processed": done, "total_errors": errs,
                    "last_run_at": last_at.isoformat() if last_at else None, "last_run_duration_ms": ms,
                    "last_error": last_error})
    return out
