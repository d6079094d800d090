"""The lease contract, run over every surface on the log engine's lease module: partitioned queues
and keyed-stream subscriptions. An expired lease redelivers; a failed delivery is retried until
`max_attempts` deliveries failed, then the message is dead-lettered once; every message is counted.

Each surface is driven through its domain service with its own wire names (Queen's `retryLimit`,
a subscription's `max_deliveries`); a lease is made to run out by moving its expiry behind the
database clock, so no test waits on time.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from postbox import db
from postbox.keyed_streams import service as streams
from postbox.keyed_streams.publishing import Outgoing
from postbox.partitioned import service as queues
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest

NAME = "contract"


@dataclass(frozen=True)
class Delivered:
    payload: str
    attempt: int       # 1 for the first delivery
    handle: Any        # what the surface needs to ack or fail it


def _attempts(dead) -> Counter:
    """Dead letters as payload -> attempts; a message dead-lettered twice shows its attempts summed."""
    out: Counter = Counter()
    for payload, attempts in dead:
        out[payload] += attempts
    return out


class PartitionedQueue:
    """One partition per message, so each message is a lease (a batch) of its own."""

    def __init__(self, tenant, max_attempts: int):
        self.p, self.tenant_id = tenant.principal, tenant.tenant_id
        queues.configure(self.p, NAME, {"retryLimit": max_attempts - 1, "retryDelay": 0, "leaseTime": 300})

    def publish(self, payloads: list[str]) -> None:
        queues.push(self.p, [Item(NAME, text, f"P-{text}") for text in payloads])

    def consume(self) -> list[Delivered]:
        out: list[Delivered] = []
        while got := queues.pop(self.p, PopRequest(NAME, batch=10)):
            out += [Delivered(m["data"], m["retryCount"] + 1, m) for m in got]
        return out

    def _settle(self, handles: list[dict], status: str) -> None:
        acks = [Ack(m["leaseId"], status, m["transactionId"], m["partitionId"], error="boom") for m in handles]
        if acks:
            queues.ack(self.p, acks)

    def ack(self, handles: list[dict]) -> None:
        self._settle(handles, "completed")

    def fail(self, handles: list[dict]) -> None:
        self._settle(handles, "failed")

    def expire_leases(self) -> int:
        with db.transaction() as conn:
            return conn.execute(
                "UPDATE log_cursors SET lease_expires_at = clock_timestamp() - interval '1 second'"
                " WHERE lease_id IS NOT NULL AND partition_id IN (SELECT id FROM log_partitions WHERE tenant_id = %s)",
                (self.tenant_id,),
            ).rowcount

    def dead(self) -> Counter:
        found = queues.dead_letters(self.p, NAME, None, None, 1000, 0)["messages"]
        return _attempts((d["data"], d["retryCount"] + 1) for d in found)


class KeyedStream:
    """One key per message, so each message is a lease (a unit's head) of its own."""

    def __init__(self, tenant, max_attempts: int):
        self.p, self.tenant_id = tenant.principal, tenant.tenant_id
        streams.publish(self.p, NAME, None, [Outgoing(payload="before")])  # creates the stream
        streams.create_subscription(self.p, NAME, None, "workers", max_deliveries=max_attempts, lease_ms=300_000,
                                    start="latest")

    def publish(self, payloads: list[str]) -> None:
        streams.publish(self.p, NAME, None, [Outgoing(payload=text, key=f"k-{text}") for text in payloads])

    def consume(self) -> list[Delivered]:
        got = streams.consume(self.p, NAME, None, "workers", max_messages=100, lease_ms=None, wait_ms=0)["messages"]
        return [Delivered(m["payload"], m["attempt"], m["receipt"]) for m in got]

    def ack(self, handles: list[str]) -> None:
        if handles:
            assert streams.ack(self.p, NAME, None, "workers", handles)["lost"] == []

    def fail(self, handles: list[str]) -> None:
        if handles:
            assert streams.nack(self.p, NAME, None, "workers", handles, 0)["lost"] == []

    def expire_leases(self) -> int:
        with db.transaction() as conn:
            return conn.execute(
                "UPDATE stream_sub_keys SET lease_until = clock_timestamp() - interval '1 second'"
                " WHERE lease_token IS NOT NULL AND sub_id IN (SELECT s.id FROM stream_subscriptions s"
                " JOIN streams t ON t.id = s.stream_id WHERE t.tenant_id = %s)",
                (self.tenant_id,),
            ).rowcount

    def dead(self) -> Counter:
        found = streams.dead_letters(self.p, NAME, None, "workers", limit=1000, before_offset=None)["messages"]
        return _attempts((d["payload"], d["attempts"]) for d in found)


@pytest.fixture(params=[PartitionedQueue, KeyedStream], ids=["partitioned", "keyed-stream"])
def surface(request, tenant):
    return lambda max_attempts: request.param(tenant, max_attempts)


def _payloads(n: int) -> list[str]:
    return [f"m{i}" for i in range(n)]


def test_an_expired_lease_redelivers_the_same_messages_as_the_next_attempt(surface):
    s = surface(5)
    s.publish(_payloads(3))
    first = s.consume()
    assert sorted((d.payload, d.attempt) for d in first) == [("m0", 1), ("m1", 1), ("m2", 1)]
    assert s.consume() == []  # leased: nothing else to hand out
    assert s.expire_leases() == 3
    again = s.consume()
    assert sorted((d.payload, d.attempt) for d in again) == [("m0", 2), ("m1", 2), ("m2", 2)]
    s.ack([d.handle for d in again])
    assert s.consume() == []
    assert s.dead() == Counter()


def test_failed_deliveries_retry_up_to_max_attempts_then_dead_letter_once(surface):
    s = surface(3)
    s.publish(_payloads(4))
    deliveries: list[tuple[str, int]] = []
    for _ in range(10):  # bounded: 3 rounds deliver, the 4th finds nothing
        got = s.consume()
        if not got:
            break
        deliveries += [(d.payload, d.attempt) for d in got]
        s.fail([d.handle for d in got])
    assert sorted(deliveries) == sorted((m, a) for m in _payloads(4) for a in (1, 2, 3))
    assert s.consume() == []
    assert s.dead() == Counter({m: 3 for m in _payloads(4)})


def test_an_expired_lease_counts_as_a_failed_attempt_up_to_the_dead_letter(surface):
    s = surface(2)
    s.publish(_payloads(2))
    for attempt in (1, 2):
        got = s.consume()
        assert sorted((d.payload, d.attempt) for d in got) == [("m0", attempt), ("m1", attempt)]
        assert s.expire_leases() == 2
    assert s.consume() == []
    assert s.dead() == Counter({"m0": 2, "m1": 2})


def test_acked_messages_are_never_retried_while_failing_ones_go_dead(surface):
    s = surface(2)
    s.publish(_payloads(6))
    delivered: Counter = Counter()
    for _ in range(10):
        got = s.consume()
        if not got:
            break
        delivered.update(d.payload for d in got)
        s.ack([d.handle for d in got if int(d.payload[1:]) % 2 == 0])
        s.fail([d.handle for d in got if int(d.payload[1:]) % 2 == 1])
    assert delivered == Counter({"m0": 1, "m2": 1, "m4": 1, "m1": 2, "m3": 2, "m5": 2})
    assert s.dead() == Counter({"m1": 2, "m3": 2, "m5": 2})


def test_concurrent_consumers_count_every_message_once_acked_or_dead(surface):
    s = surface(3)
    total = 40
    s.publish(_payloads(total))
    delivered: Counter = Counter()
    in_flight: set[str] = set()
    guard, errors, violations = threading.Lock(), [], []

    def consumer() -> None:
        try:
            idle = 0
            while idle < 3:
                got = s.consume()
                if not got:
                    idle += 1
                    continue
                idle = 0
                with guard:
                    for d in got:
                        if d.payload in in_flight:
                            violations.append(f"{d.payload} leased twice at once")
                        in_flight.add(d.payload)
                        delivered[d.payload] += 1
                time.sleep(0.001)
                with guard:  # released before the ack, so a later lease of it is no false alarm
                    in_flight.difference_update(d.payload for d in got)
                s.ack([d.handle for d in got if int(d.payload[1:]) % 4 != 0])
                s.fail([d.handle for d in got if int(d.payload[1:]) % 4 == 0])
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=consumer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert not violations, violations
    poison = {m for m in _payloads(total) if int(m[1:]) % 4 == 0}
    assert delivered == Counter({m: 3 if m in poison else 1 for m in _payloads(total)})
    assert s.consume() == []
    assert s.dead() == Counter({m: 3 for m in poison})
