"""Several consumers of one FIFO queue at once, half speaking JSON and half Query: every message is
received exactly once, each receive answers each of its groups as one run that goes on exactly where
that group's last run ended, takes as few groups as it can, and no group is ever held by two
consumers at once."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

from sqs_clients import query_sqs_client, sqs_client

GROUPS, PER_GROUP, CONSUMERS = 8, 30, 4


def test_consumers_at_once_keep_each_group_whole_in_order_and_held_once(sqs, gateway, mint, query_model_path):
    url = sqs.create_queue(QueueName="orders.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
    for i in range(PER_GROUP):  # the groups' messages interleaved, one of each group in turn
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(g), "MessageBody": f"g{g}:{i}", "MessageGroupId": f"g{g}"} for g in range(GROUPS)])
    seen: dict[str, list[int]] = defaultdict(list)
    holders: dict[str, str] = {}
    lock = threading.Lock()
    problems: list[str] = []
    go = threading.Barrier(CONSUMERS)

    def consume(who: str, client) -> None:
        rng = random.Random(who)
        go.wait(30)
        idle_since = None
        while True:
            got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=rng.randint(1, 10),
                                         VisibilityTimeout=60).get("Messages", [])
            if not got:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 3:
                    return
                continue
            idle_since = None
            runs: list[tuple[str, list[int]]] = []
            for m in got:
                group, n = m["Body"].split(":")
                if runs and runs[-1][0] == group:
                    runs[-1][1].append(int(n))
                else:
                    runs.append((group, [int(n)]))
            with lock:
                if len({g for g, _ in runs}) != len(runs):
                    problems.append(f"{who}: a group's messages apart in one receive: {[m['Body'] for m in got]}")
                # All was sent first and only the holder of a group's first message takes the rest, so
                # a receive takes each group to its end, but the last one it takes (as few groups as it can).
                if any(numbers[-1] != PER_GROUP - 1 for _, numbers in runs[:-1]):
                    problems.append(f"{who}: more groups than needed: {[m['Body'] for m in got]}")
                for group, numbers in runs:
                    if holders.get(group) is not None:
                        problems.append(f"{group} held by {holders[group]} and {who}")
                    holders[group] = who
                    expected = list(range(len(seen[group]), len(seen[group]) + len(numbers)))
                    if numbers != expected:
                        problems.append(f"{who}: {group} answered {numbers} after {seen[group][-3:]}")
                    seen[group].extend(numbers)
            time.sleep(rng.random() * 0.01)
            with lock:  # deleted, the groups are free again (released before the delete lands: never late)
                for group, _ in runs:
                    holders.pop(group, None)
            client.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])

    clients = [sqs_client(gateway.url, mint("write")) if i % 2 else
               query_sqs_client(gateway.url, mint("write"), query_model_path) for i in range(CONSUMERS)]
    threads = [threading.Thread(target=consume, args=(f"c{i}", c)) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert not problems, problems[:5]
    assert sum(len(v) for v in seen.values()) == GROUPS * PER_GROUP
    for g in range(GROUPS):
        assert seen[f"g{g}"] == list(range(PER_GROUP)), g
