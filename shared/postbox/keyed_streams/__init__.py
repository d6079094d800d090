"""Keyed streams (`/v1/streams`): named logs per project with scheduled, expiring and idempotent
messages, consumed by named subscriptions with per-key ordering, leases and dead-lettering.

Payloads live in the log engine (owner_kind 'stream', one partition per stream); what changes about
a message (status, schedule, expiry, per-subscription delivery) lives in this package's tables.
"""
