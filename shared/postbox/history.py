"""A minute-by-minute history of each queue, work queue, partitioned queue and keyed stream, for the
console's charts: its depth, its oldest message's age and its messages in and out per minute over
the last hour or day.

Nothing is counted here: once a minute the history agent copies what the surfaces' counters
already say into `history_minutes` (`record`, one SQL call) and deletes what is older than a day
(`trim`). A surface's history route finds its resource as its other reads do (tenant, project,
permissions) and hands the resource's id to `series`. A chart is therefore up to a minute behind.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from . import db

KINDS = ("queue", "work", "partitioned", "stream")
WINDOWS = {"hour": 60, "day": 24 * 60}  # minutes a chart shows
KEEP = "1 day 5 minutes"  # a day, and the row before it that the day's first rate is measured from
STEP_SECONDS = 60

_SERIES = """
WITH bound AS (SELECT date_trunc('minute', clock_timestamp()) AS now)
(SELECT extract(epoch FROM h.minute)::bigint, h.in_total, h.out_total, h.depth, h.oldest_age_s,
        extract(epoch FROM b.now)::bigint
 FROM history_minutes h, bound b
 WHERE h.kind = %(k)s AND h.resource_id = %(r)s AND h.minute > b.now - %(m)s * interval '1 minute')
UNION ALL
(SELECT extract(epoch FROM h.minute)::bigint, h.in_total, h.out_total, h.depth, h.oldest_age_s,
        extract(epoch FROM b.now)::bigint
 FROM history_minutes h, bound b
 WHERE h.kind = %(k)s AND h.resource_id = %(r)s AND h.minute <= b.now - %(m)s * interval '1 minute'
 ORDER BY h.minute DESC LIMIT 1)
ORDER BY 1
"""


def record(at: datetime | None = None) -> int:
    """Record the current minute (or the minute `at` falls in) for every resource; the rows written."""
    with db.connection() as conn:
        return int(conn.execute("SELECT history_record(%s)", (at,)).fetchone()[0])


def trim() -> int:
    """Delete what is older than the history keeps; the rows deleted."""
    with db.connection() as conn:
        return int(conn.execute("SELECT history_trim(%s::interval)", (KEEP,)).fetchone()[0])


def _per_minute(before: int | None, later: int, minutes: float) -> float | int | None:
    """Messages a minute between two cumulative counts `minutes` apart (a whole count for one)."""
    if before is None or minutes <= 0:
        return None
    delta = max(later - before, 0)
    return delta if minutes == 1 else round(delta / minutes, 2)


def series(conn: psycopg.Connection, kind: str, resource_id: int, window: str) -> dict[str, Any]:
    """The resource's chart data for `window` ("hour" or "day"), as columns of equal length: each
    recorded minute's time (Unix seconds), depth, oldest age (seconds, null when nothing waited) and
    messages in and out per minute since the minute recorded before it (null for the first minute
    ever recorded; averaged when the agent missed minutes)."""
    minutes = WINDOWS[window]
    rows = conn.execute(_SERIES, {"k": kind, "r": resource_id, "m": minutes}).fetchall()
    now = rows[0][5] if rows else int(conn.execute("SELECT extract(epoch FROM date_trunc('minute',"
                                                   " clock_timestamp()))::bigint").fetchone()[0])
    start = now - minutes * STEP_SECONDS
    out: dict[str, Any] = {"window": window, "step_seconds": STEP_SECONDS, "from": start, "to": now,
                           "t": [], "depth": [], "oldest_age_sec": [], "in_per_min": [], "out_per_min": []}
    previous = None
    for t, in_total, out_total, depth, oldest, _ in rows:
        if t > start:
            gap = (t - previous[0]) / STEP_SECONDS if previous else 0
            out["t"].append(t)
            out["depth"].append(depth)
            out["oldest_age_sec"].append(None if oldest is None else round(oldest, 1))
            out["in_per_min"].append(_per_minute(previous[1] if previous else None, in_total, gap))
            out["out_per_min"].append(_per_minute(previous[2] if previous else None, out_total, gap))
        previous = (t, in_total, out_total)
    return out
