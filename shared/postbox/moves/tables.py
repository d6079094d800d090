"""Which rows a tenant owns: each tenant-owned table with the predicate that selects the tenant's
rows, parents before children (the order a copy must follow; a drain deletes in reverse).

A stand-in until the ownership catalog lands: `tables()` is the one function the mover asks, so the
catalog replaces this list in one line. A predicate is SQL on the table's own columns (unqualified,
or qualified by the table's name), with `{tenant}` where the tenant's id goes.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

_OWN = "tenant_id = {tenant}"


def _via(column: str, parent: str, parent_key: str = "id") -> str:
    return f"{column} IN (SELECT {parent_key} FROM {parent} WHERE tenant_id = {{tenant}})"


_STREAM_SUBS = ("sub_id IN (SELECT s.id FROM stream_subscriptions s JOIN streams t ON t.id = s.stream_id"
                " WHERE t.tenant_id = {tenant})")

# (table, predicate, key when the table has no primary key)
_TABLES: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("tenants", "id = {tenant}", None),
    ("projects", _OWN, None),
    ("api_keys", _OWN, None),
    ("sqs_credentials", _OWN, None),
    ("tenant_monthly_messages", _OWN, None),
    ("tenant_storage", _OWN, None),
    # queues (and their SQS face)
    ("queues", _OWN, None),
    ("queue_heads", _via("queue_id", "queues"), None),
    ("queue_counters", _via("queue_id", "queues"), None),
    ("queue_messages", _via("queue_id", "queues"), None),
    ("queue_archive", _via("queue_id", "queues"), None),
    ("sqs_queues", _via("queue_id", "queues"), None),
    ("sqs_dedup", _via("queue_id", "queues"), None),
    ("sqs_purges", _via("queue_id", "queues"), None),
    ("sqs_receive_attempts", _via("queue_id", "queues"), None),
    ("sqs_deleted_queues", _OWN, None),
    ("sqs_move_tasks", _OWN, None),
    # the log engine (partitioned queues, streams, durable, flows)
    ("log_partitions", _OWN, None),
    ("log_segments", _via("partition_id", "log_partitions"), None),
    ("log_cursors", _via("partition_id", "log_partitions"), None),
    ("log_dedup", _via("partition_id", "log_partitions"), None),
    ("pq_queues", _OWN, None),
    ("pq_counters", _via("queue_id", "pq_queues"), None),
    ("pq_groups", _via("queue_id", "pq_queues"), None),
    ("pq_dead_letters", _OWN, None),
    ("durable_streams", _OWN, None),
    ("durable_producers", _via("stream_id", "durable_streams"), None),
    ("durable_snapshots", _via("stream_id", "durable_streams"), None),
    ("durable_snapshot_parts", _via("stream_id", "durable_streams"), None),
    ("streams", _OWN, None),
    ("stream_subscriptions", _via("stream_id", "streams"), None),
    ("stream_messages", _via("stream_id", "streams"), None),
    ("stream_sub_keys", _STREAM_SUBS, None),
    ("stream_pending", _STREAM_SUBS, None),
    ("stream_dead", _STREAM_SUBS, None),
    ("flow_queries", _OWN, None),
    ("flow_hosted", _via("query_id", "flow_queries"), None),
    ("flow_state", _via("query_id", "flow_queries"), None),
    ("flow_quotas", _OWN, None),
    # work
    ("work_scopes", _OWN, None),
    ("work_schemas", _via("scope_id", "work_scopes"), None),
    ("work_queues", _OWN, None),
    ("work_queue_counters", _via("queue_id", "work_queues"), None),
    ("work_claim_heads", _via("queue_id", "work_queues"), None),
    ("work_queue_acl", _via("scope_id", "work_scopes"), None),
    ("work_acl_grants", _via("scope_id", "work_scopes"), None),
    ("work_hitl_patterns", _via("scope_id", "work_scopes"), None),
    ("work_routing_rules", _via("scope_id", "work_scopes"), None),
    ("work_trusted_scopes", _via("scope_id", "work_scopes"), None),
    ("work_subscriptions", _OWN, None),
    ("work_messages", _OWN, None),
    ("work_deliveries", _via("subscription_id", "work_subscriptions"), None),
    ("work_streams", _via("scope_id", "work_scopes"), None),
    ("work_stream_chunks", "stream IN (SELECT w.id FROM work_streams w JOIN work_scopes s ON s.id = w.scope_id"
                           " WHERE s.tenant_id = {tenant})", None),
    ("work_journal", _OWN, ("seq",)),
    ("work_journal_marks", _via("scope_id", "work_scopes"), None),
    ("work_gdpr_jobs", _OWN, None),
    ("work_gdpr_export_files", _via("job_id", "work_gdpr_jobs"), None),
    ("work_gdpr_export_parts", _via("job_id", "work_gdpr_jobs"), None),
)


@dataclass(frozen=True)
class Table:
    """One tenant-owned table as the mover handles it: its copied columns (generated ones are not
    copied), its key (the primary key, or the one named for a table without), the SQL types of the
    key's columns, and the predicate with the tenant's id in it."""

    name: str
    where: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    key_types: tuple[str, ...]
    has_primary_key: bool
    unhashable: tuple[str, ...] = ()  # columns of a type without a hash function (json): hashed as text

    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.name)

    def cols(self, names: tuple[str, ...] | None = None) -> sql.Composable:
        return sql.SQL(", ").join(map(sql.Identifier, names or self.columns))


def tables(conn: psycopg.Connection, tenant_id: str) -> list[Table]:
    """Every table the tenant owns rows in, parents first, read from `conn`'s catalog."""
    tenant = sql.Literal(tenant_id).as_string(conn)
    found = []
    for name, where, key in _TABLES:
        columns = [r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
            " AND NOT attisdropped AND attgenerated = '' ORDER BY attname", (name,))]
        primary = [r[0] for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey::int2[], a.attnum)", (name,))]
        chosen = tuple(primary) if primary else key
        if not chosen:
            raise RuntimeError(f"table {name} has no primary key and the mover was given none")
        types = tuple(conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attname = %s", (name, c)).fetchone()[0] for c in chosen)
        unhashable = tuple(r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND atttypid = 'json'::regtype", (name,)))
        found.append(Table(name, where.replace("{tenant}", tenant), tuple(columns), chosen, types, bool(primary),
                           unhashable))
    return found
