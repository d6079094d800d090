"""The log engine: append-only partitioned logs of segments (partitioned queues, flows, streams, durable).

Modules: `frames` (the binary layout of records), `store` (partitions, appends, reads, retention),
`cursors` (where each consumer group reads), `leases` (leasing, retry and dead letters of consumer
work) and `retry` (the one retry policy every surface maps its own names onto).
"""
