"""Waiting, in a test, until a long poll has registered itself as a waiter."""

from __future__ import annotations

import time

from postbox import db


def wait_for_waiter(channel_prefix: str, timeout_s: float = 10.0) -> None:
    """Return once a long poll waits on a channel starting with `channel_prefix`: a write after this
    must wake it through NOTIFY (with `notify_only`, nothing else would in time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with db.connection() as conn:
            found = conn.execute("SELECT count(*) FROM waiters WHERE starts_with(channel, %s)",
                                 (channel_prefix,)).fetchone()[0]
        if found:
            return
        time.sleep(0.01)
    raise AssertionError(f"no long poll waited on {channel_prefix}* within {timeout_s} s")
