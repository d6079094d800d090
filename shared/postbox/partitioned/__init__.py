"""Partitioned queues (Queen-MQ style) on the log engine: push, pop with leases, ack, DLQ.

Modules: `queues` (queue rows and options), `payloads` (JSON and encryption envelopes),
`produce` (push on an open connection), `consume` (pop with leases), `acks` (ack, extend),
`failures` (retry or dead letter, on the log engine's lease module), `shapes` (message documents),
`dlq` (dead letters), `counters` (per-queue counters), `resources` (a queue's state for the
resources API), `admin` (delete a queue or a consumer group, list, overview), `reads` (reads by
offset), `maintenance` (the agent's sweeps), `service` (one unit of work per call).
"""

OWNER_KIND = "pq"  # log_partitions.owner_kind of a partitioned queue's partitions
QUEUE_MODE = "__QUEUE_MODE__"  # the group of consumers that pop without naming one
DEFAULT_PARTITION = "Default"
