"""Consumer functions the dispatcher tests name in POSTBOX_CONSUMERS."""

from __future__ import annotations

import threading
import time

from postbox.queues import consumer_functions

calls: list[dict] = []
call_times: list[float] = []  # time.monotonic() at each call's start
active = 0
peak = 0
fail_next = 0
_lock = threading.Lock()


def name_for(tenant_id: str, name: str = "record-fn") -> str:
    """The tenant's function `name` (its whole name): POSTBOX_CONSUMERS serves it by `name`."""
    return consumer_functions.prefix(tenant_id) + name


def reset() -> None:
    global active, peak, fail_next
    calls.clear()
    call_times.clear()
    active = peak = fail_next = 0


def record(event: dict, context: object) -> dict:
    """Succeeds after a short pause, counting how many calls overlap."""
    global active, peak, fail_next
    with _lock:
        active += 1
        peak = max(peak, active)
        failing = fail_next > 0
        if failing:
            fail_next -= 1
        calls.append(event)
        call_times.append(time.monotonic())
    try:
        time.sleep(0.05)
        if failing:
            raise RuntimeError("consumer exploded")
        return {"ok": True}
    finally:
        with _lock:
            active -= 1
