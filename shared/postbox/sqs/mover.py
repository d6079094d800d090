"""The move agent's run: it takes the message move tasks no other run holds and moves their
messages for a time budget, in one-second slices of at most each task's rate, in batches of one
transaction each (sqs_move_batch). The clock and the sleep are parameters, so a test can give a run
any elapsed time without waiting for it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from .. import db
from .moves import BATCH

TASKS_PER_RUN = 50
LEASE_MARGIN_S = 10.0  # a run holds its tasks this much past its budget: it is surely over by then


def run(budget_s: float, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep) -> int:
    """Move the held tasks' messages for about `budget_s` seconds; how many moved."""
    runner = uuid.uuid4()
    with db.connection() as conn:
        tasks = conn.execute("SELECT task, rate FROM sqs_move_take(%s, %s, %s)",
                             (runner, budget_s + LEASE_MARGIN_S, TASKS_PER_RUN)).fetchall()
    if not tasks:
        return 0
    try:
        return drive(dict(tasks), budget_s, clock, sleep)
    finally:
        with db.connection() as conn:
            conn.execute("SELECT sqs_move_release(%s)", (runner,))


def drive(tasks: dict[uuid.UUID, int], budget_s: float, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """Move tasks (handle -> rate per second) one slice a second, each slice at most a task's rate,
    until the budget is spent or no task is left running; how many moved. A slice that overran its
    second pushes the next one back, so no second ever sees more than the rate."""
    active = dict(tasks)
    began = slice_at = clock()
    moved = 0
    while active:
        for task, rate in list(active.items()):
            n, running = _slice(task, rate)
            moved += n
            if not running:
                del active[task]
        slice_at += 1.0
        if not active or slice_at - began >= budget_s:
            break
        wait = slice_at - clock()
        if wait > 0:
            sleep(wait)
        else:
            slice_at = clock()
    return moved


def _slice(task: uuid.UUID, rate: int) -> tuple[int, bool]:
    """Up to `rate` messages of one task, a batch at a time; how many, and whether it still runs."""
    moved = 0
    while moved < rate:
        want = min(BATCH, rate - moved)
        with db.connection() as conn:
            n, running = conn.execute("SELECT moved, active FROM sqs_move_batch(%s, %s)", (task, want)).fetchone()
        moved += n
        if not running:
            return moved, False
        if n < want:  # what is left is held by receives at the moment: the next slice tries again
            break
    return moved, True
