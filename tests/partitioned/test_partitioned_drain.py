"""Volume: four consumers draining 100,000 messages across 8 partitions, each exactly once and in
each partition's order."""

from __future__ import annotations

import threading
import time
from collections import Counter

from postbox.partitioned import service
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest

TOTAL, PARTITIONS, CONSUMERS = 100_000, 8, 4


def test_four_consumers_drain_100k_messages_across_8_partitions_exactly_once(tenant):
    p = tenant.principal
    for start in range(0, TOTAL, 1000):
        service.push(p, [Item("drain", i, f"P{i % PARTITIONS}") for i in range(start, start + 1000)])
    seen: list[list[tuple[str, int]]] = [[] for _ in range(CONSUMERS)]
    # Every batch in the order it was handed out: a partition's next lease is only granted after
    # the ack of the one before, so numbering batches between pop and ack orders each partition's.
    delivered: list[tuple[int, set[str], list[int], list[int]]] = []
    numbering = threading.Lock()
    deadline = time.monotonic() + 120  # a stuck drain fails below instead of hanging

    def consumer(k: int) -> None:
        # Empty pops are normal near the end (the partitions left are leased by others): stop once
        # everything pushed was seen (a repeat would then leave one missing, caught below).
        while sum(map(len, seen)) < TOTAL and time.monotonic() < deadline:
            got = service.pop(p, PopRequest("drain", batch=500))
            if not got:
                time.sleep(0.005)
                continue
            seen[k].extend((m["partition"], m["data"]) for m in got)
            with numbering:
                delivered.append((len(delivered), {m["partition"] for m in got}, [m["offset"] for m in got],
                                  [m["data"] for m in got]))
            service.ack(p, [Ack(got[0]["leaseId"], "completed", got[-1]["transactionId"], got[0]["partitionId"])])

    threads = [threading.Thread(target=consumer, args=(k,)) for k in range(CONSUMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [v for part in seen for _, v in part]
    counts = Counter(everything)
    assert len(everything) == TOTAL and set(counts) == set(range(TOTAL)) and max(counts.values()) == 1
    assert all(len(names) == 1 for _, names, _, _ in delivered), "a batch holds one partition"
    for part in range(PARTITIONS):  # order inside each partition, across consumers' batches, as delivered
        batches = sorted((n, offs, vals) for n, names, offs, vals in delivered if names == {f"P{part}"})
        offsets = [o for _, offs, _ in batches for o in offs]
        values = [v for _, _, vals in batches for v in vals]
        assert offsets == list(range(len(offsets))), f"P{part}: offsets out of order"
        assert values == list(range(part, TOTAL, PARTITIONS)), f"P{part}: messages out of push order"
    assert all(seen), "every consumer took part"
    assert service.pop(p, PopRequest("drain", batch=10)) == []
