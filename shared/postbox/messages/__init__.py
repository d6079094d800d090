"""The message engine: rows with per-message state, claimed with SKIP LOCKED (queues and work)."""
