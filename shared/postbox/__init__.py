"""Postbox: durable queues and streams on PostgreSQL (the domain layer shared by every function)."""

__version__ = "0.1.0"
