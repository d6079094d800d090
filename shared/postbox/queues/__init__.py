"""The queues surface's domain: pgmq-style queues on the message engine, with plan limits."""
