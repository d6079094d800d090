"""Threads that interleave as finely as the interpreter allows: a race between requests served by one
process shows on every run rather than rarely."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def switching_often() -> Iterator[None]:
    """The interpreter switching threads as often as it can, for the block."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_interleaved(target: Callable[[str], None], names: list[str], timeout_s: float = 60) -> None:
    """`target(name)` on a thread per name, all at once, switching as often as the interpreter can."""
    with switching_often():
        threads = [threading.Thread(target=target, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout_s)


def answers_at_once(call: Callable[[], object], n: int, timeout_s: float = 60) -> list[object]:
    """What `call()` answers on `n` threads released together (a barrier), each answer or the
    exception it raised: for races where every caller's answer matters."""
    return each_at_once([call] * n, timeout_s)


def each_at_once(calls: list[Callable[[], object]], timeout_s: float = 60) -> list[object]:
    """What each of `calls` answers, each on its own thread, all released together (a barrier): the
    answer or the exception it raised, in the order of `calls`. For races of different requests (a
    deletion racing an update of what it deletes)."""
    start, answers = threading.Barrier(len(calls)), [None] * len(calls)

    def one(i: int) -> None:
        start.wait(timeout_s)
        try:
            answers[i] = calls[i]()
        except Exception as e:  # noqa: BLE001 - the answer under test
            answers[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    return answers
