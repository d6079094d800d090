"""How many requests one caller may have waiting at once (long polls, SSE windows), counted across
every process: a request that goes to wait takes one of its caller's slots (a row with a lease,
`wait_slot_take`) and gives it back when it answers; over the cap it is refused with
`TooManyRequests` (a 429 with `Retry-After` in each surface's envelope; SQS's RequestThrottled),
having waited for nothing. A request answered at once takes no slot.

The caller is an authenticated key's tenant (POSTBOX_WAITS_PER_TENANT), or, for an anonymous reader
of public durable streams (no key, or a project's `anon` key), its client address
(POSTBOX_WAITS_PER_ADDRESS).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from . import config, db
from .errors import TooManyRequests, Unavailable
from .tenancy import Principal

RETRY_AFTER_S = 2
LEASE_SLACK_S = 5.0  # a slot's lease outlasts its wait by this much (a request that died gives it back so)


class Caller(NamedTuple):
    """Whose waits count together, and how many they may be."""

    key: str
    cap: int


def caller(principal: Principal | None, address: str | None = None) -> Caller:
    """An authenticated key's tenant; without one (or with an `anon` key), the client's address."""
    settings = config.settings()
    if principal is not None and not principal.is_anonymous:
        return Caller(f"tenant:{principal.tenant_id}", settings.waits_per_tenant)
    return Caller(f"address:{address or 'unknown'}", settings.waits_per_address)


@contextmanager
def held(who: Caller, seconds: float) -> Iterator[None]:
    """One of `who`'s slots for the block (at most `seconds` plus LEASE_SLACK_S), or TooManyRequests."""
    waiter = uuid.uuid4()
    with db.connection() as conn:
        taken = conn.execute("SELECT wait_slot_take(%s, %s, %s, %s)",
                             (who.key, waiter, seconds + LEASE_SLACK_S, who.cap)).fetchone()[0]
    if not taken:
        raise TooManyRequests(f"At most {who.cap} requests of one caller may wait at once; retry when one"
                              " has been answered.", code="too_many_waits", retry_after=RETRY_AFTER_S)
    try:
        yield
    finally:
        try:
            with db.connection() as conn:
                conn.execute("DELETE FROM wait_slots WHERE caller = %s AND waiter = %s", (who.key, waiter))
        except Unavailable:
            pass  # the database went away: the slot's lease runs out by itself
