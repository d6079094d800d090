"""The work surface's agents as bounded sweeps: each batch is one SQL function call in its own
transaction, taking rows with SKIP LOCKED, so two runs at once split the work between them.

- visibility timeout: claims whose time ran out go back to pending (or to the dead letter after
  their last attempt). Claims never depend on it: each claim recovers its own queue's first.
- expiry: pending or claimed messages past `ttl_seconds` or `deadline` end as `expired`, and so
  do broadcast messages still being delivered (with their open deliveries).
- priority aging: waiting messages of priority queues rise (see AGING_STEP_S).
- dead-letter monitor: one alert event per scope whose dead-letter depth reaches its threshold.
- archiver: ended messages past their scope's `retention_days` are deleted, and the journal's weeks
  past the audit retention are dropped.
- journal: the moves of the journal's rows are folded into the queues' counters, and the journal's
  week partitions are made ahead.
"""

from __future__ import annotations

import itertools
import time

from .. import db

BATCH = 1000
AGING_STEP_S = 60  # a waiting message gains ~a tenth of a tier per minute (a tier per ten minutes)


def _drain(statement: str, params: tuple, budget_s: float, max_batches: int | None = 50, batch: int = BATCH) -> int:
    """Run a sweep batch after batch until one comes back short, the budget is spent or (when given)
    max_batches have run."""
    done, deadline = 0, time.monotonic() + budget_s
    for _ in range(max_batches) if max_batches is not None else itertools.count():
        with db.connection() as conn:
            n = conn.execute(statement, params).fetchone()[0]
        done += n
        if n < batch or time.monotonic() > deadline:
            break
    return done


JOURNAL_WEEKS_AHEAD = 4


def recover_claims(budget_s: float = 20.0) -> int:
    fold_counts()  # the queues holding claims are found by their counters
    return _drain("SELECT work_recover(NULL, %s)", (BATCH,), budget_s)


def fold_counts() -> int:
    """Fold the journal's moves into the queues' counters; returns the journal rows folded."""
    with db.connection() as conn:
        return conn.execute("SELECT work_counts_fold()").fetchone()[0]


def keep_journal() -> dict[str, int]:
    """The journal agent's run: the counters folded, the coming weeks' partitions made."""
    folded = fold_counts()
    with db.connection() as conn:
        made = conn.execute("SELECT work_journal_partitions(%s)", (JOURNAL_WEEKS_AHEAD,)).fetchone()[0]
    return {"folded": folded, "partitions": made}


def expire(budget_s: float = 20.0) -> int:
    """Messages past their time, and broadcast messages still being delivered past theirs."""
    return (_drain("SELECT work_expire(%s)", (BATCH,), budget_s)
            + _drain("SELECT work_expire_deliveries(%s)", (BATCH,), budget_s))


def age_priorities(budget_s: float = 20.0, step_s: int = AGING_STEP_S) -> int:
    return _drain("SELECT work_age(%s, %s)", (BATCH, step_s), budget_s)


def watch_dead_letters(budget_s: float = 20.0) -> int:
    return _drain("SELECT work_watch_dead_letters(%s)", (BATCH,), budget_s, max_batches=1)


def archive(budget_s: float = 20.0, batch: int = BATCH) -> int:
    """Bounded by its budget alone: a cap on batches capped the rate at which ended messages can
    leave (50,000 a run, so ~167 a second on a five-minute schedule), and above it the table grew."""
    return _drain("SELECT work_archive(%s)", (batch,), budget_s, max_batches=None, batch=batch)
