"""The database clock, which visibility, scheduling and expiry decisions use (tests never assert timings)."""

from __future__ import annotations

import time

from postbox import db


def db_now():
    with db.transaction() as conn:
        return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def wait_for_db_clock(instant) -> None:
    """Sleep until the database clock has passed `instant`."""
    while db_now() <= instant:
        time.sleep(0.05)
