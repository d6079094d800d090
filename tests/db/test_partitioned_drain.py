"""Volume: four consumers draining 100,000 messages across 8 partitions, each exactly once."""

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
            service.ack(p, [Ack(got[0]["leaseId"], "completed", got[-1]["transactionId"], got[0]["partitionId"])])

    threads = [threading.Thread(target=consumer, args=(k,)) for k in range(CONSUMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [v for part in seen for _, v in part]
    counts = Counter(everything)
    assert len(everything) == TOTAL and set(counts) == set(range(TOTAL)) and max(counts.values()) == 1
    for part in range(PARTITIONS):  # order inside each partition, across consumers' batches
        values = [v for s in seen for name, v in s if name == f"P{part}"]
        assert sorted(values) == list(range(part, TOTAL, PARTITIONS))
    assert all(seen), "every consumer took part"
    assert service.pop(p, PopRequest("drain", batch=10)) == []
