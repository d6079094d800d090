"""The log engine: append-only partitioned logs of segments (partitioned queues, flows, streams, durable)."""
