"""Waiting reads: a long-poll, the bounded window of reads a buffered SSE answer is made of, and the
open follow of a streamed one. All wait with the shared `wakeup.long_poll` on the stream's channel
(appends, closes and deletes notify it)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from postbox import wait_slots, wakeup
from postbox.wait_slots import Caller

from . import reads
from .model import Read, Scope


def wait_read(scope: Scope, name: str, start: int | None, *, max_bytes: int, timeout_s: float,
              caller: Caller | None, now: bool = False, incarnation: str | None = None) -> tuple[Read, bool]:
    """A long-poll: answer at once if there is data (or the stream is closed at its tail), else wait up
    to `timeout_s` for an append, as one of `caller`'s waits (None: the request holds its slot already).
    Returns the read and whether it timed out."""
    position = {"start": start, "now": now}

    def attempt() -> tuple[Read, list[str]]:
        result = reads.read(scope, name, position["start"], max_bytes=max_bytes, now=position["now"],
                            incarnation=incarnation)
        position.update(start=result.start, now=False)  # `now` is the tail of the first look only
        return result, [wakeup.channel(wakeup.DURABLE, result.stream.id)]

    result = wakeup.long_poll(attempt, timeout_s, caller=caller, done=lambda r: not r.waits)
    return result, result.waits


def window(scope: Scope, name: str, start: int | None, *, now: bool, incarnation: str | None, max_bytes: int,
           timeout_s: float, caller: Caller) -> list[Read]:
    """The reads of one SSE answer: the catch-up, then waits for appends until `timeout_s` has passed.
    It ends at once when the stream is closed at its tail, when `max_bytes` were read, or when data
    arrived after a wait (the client reconnects from the last offset)."""
    deadline = time.monotonic() + timeout_s
    batches = [reads.read(scope, name, start, max_bytes=max_bytes, now=now, incarnation=incarnation)]
    size, waited = 0, False
    while True:
        result = batches[-1]
        size += sum(len(p) for p in result.payloads)
        if result.closed_at_tail or size >= max_bytes or (waited and result.payloads):
            return batches
        position = result.next_offset
        if not result.up_to_date:
            batches.append(reads.read(scope, name, position, max_bytes=max_bytes, incarnation=incarnation))
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            return batches
        result, timed_out = wait_read(scope, name, position, max_bytes=max_bytes, timeout_s=left, caller=caller,
                                      incarnation=incarnation)
        if timed_out:
            return batches
        waited = True
        batches.append(result)


def follow(scope: Scope, name: str, start: int | None, *, now: bool, incarnation: str | None, max_bytes: int,
           total_bytes: int, heartbeat_s: float, until: float, caller: Caller) -> Iterator[Read | None]:
    """The reads of a streamed SSE answer, each of at most `max_bytes`: the catch-up, then each append
    as it lands, and None after every `heartbeat_s` without one (the answer's keep-alive). It ends
    when the stream is closed at its tail, when `until` (a `time.monotonic()` instant) has come, or
    when `total_bytes` were read (the client reconnects from the last offset it was given).

    An answer that may wait holds one of `caller`'s slots from its first read to its end, taken
    before that read is yielded, so a caller over its cap is refused (TooManyRequests) before the
    answer starts; a stream already closed at the catch-up's end takes none."""
    result = reads.read(scope, name, start, max_bytes=max_bytes, now=now, incarnation=incarnation)
    if result.closed_at_tail:
        yield result
        return
    with wait_slots.held(caller, until - time.monotonic()):
        size = 0
        while True:
            yield result
            size += sum(len(p) for p in result.payloads)
            if result.closed_at_tail or size >= total_bytes:
                return
            position = result.next_offset
            if not result.up_to_date:
                result = reads.read(scope, name, position, max_bytes=max_bytes, incarnation=incarnation)
                continue
            while True:
                left = until - time.monotonic()
                if left <= 0:
                    return
                result, timed_out = wait_read(scope, name, position, max_bytes=max_bytes, caller=None,
                                              timeout_s=min(heartbeat_s, left), incarnation=incarnation)
                if not timed_out:
                    break
                yield None
