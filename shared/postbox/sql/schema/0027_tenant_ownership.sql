-- Whose rows each table holds, so a tenant's move to another cell copies every row it owns and
-- nothing else (postbox.ownership reads these comments; a test fails on a table that says nothing).
--
-- A table with a `tenant_id` column is the tenant's by that column and needs no comment. Any other
-- table says, in its comment, one of:
--   'tenant: <column>'                        the column holds the tenant's id (tenants.id)
--   'tenant: <column> -> <table>'             the row is its parent's: <column> = <table>.id, and
--                                             the parent is the tenant's (by its own declaration)
--   'tenant: <column> -> <table> if <c> = ''<v>''; ...'   a parent that depends on a kind column
--   'shared: <why>'                           the cell's own rows, no tenant's: never moved
-- A comment overrides the `tenant_id` rule (the directory has the column and is not moved).

COMMENT ON TABLE tenants IS 'tenant: id';

-- Shared: the cell's own.
COMMENT ON TABLE plans IS 'shared: the plans tenants are on, the same on every cell (migrations write them)';
COMMENT ON TABLE schema_migrations IS 'shared: the migrator''s record of this database''s table migrations';
COMMENT ON TABLE schema_functions IS 'shared: the migrator''s record of this database''s functions files';
COMMENT ON TABLE agent_runs IS 'shared: each agent''s runs on this cell';
COMMENT ON TABLE work_counts_folded IS 'shared: how far this cell has folded its work journal into the counters';
COMMENT ON TABLE waiters IS 'shared: long polls waiting on this cell right now (unlogged: a row lives for one wait)';
COMMENT ON TABLE wait_slots IS 'shared: requests waiting on this cell right now (unlogged: a row lives for one wait)';
COMMENT ON TABLE control.tenant_cells IS 'shared: the directory (the first cell''s is the one read); a move updates it';

-- The message engine and the SQS face: a queue's rows.
COMMENT ON TABLE queue_messages IS 'tenant: queue_id -> queues';
COMMENT ON TABLE queue_archive IS 'tenant: queue_id -> queues';
COMMENT ON TABLE queue_counters IS 'tenant: queue_id -> queues';
COMMENT ON TABLE queue_heads IS 'tenant: queue_id -> queues';
COMMENT ON TABLE consumer_slots IS 'tenant: queue_id -> queues';
COMMENT ON TABLE consumer_kicks IS 'tenant: queue_id -> queues';
COMMENT ON TABLE sqs_queues IS 'tenant: queue_id -> queues';
COMMENT ON TABLE sqs_dedup IS 'tenant: queue_id -> queues';
COMMENT ON TABLE sqs_receive_attempts IS 'tenant: queue_id -> queues';
COMMENT ON TABLE sqs_purges IS 'tenant: queue_id -> queues';

-- The log engine: a partition's rows (log_partitions has the tenant).
COMMENT ON TABLE log_segments IS 'tenant: partition_id -> log_partitions';
COMMENT ON TABLE log_dedup IS 'tenant: partition_id -> log_partitions';
COMMENT ON TABLE log_cursors IS 'tenant: partition_id -> log_partitions';

-- Partitioned queues.
COMMENT ON TABLE pq_groups IS 'tenant: queue_id -> pq_queues';
COMMENT ON TABLE pq_counters IS 'tenant: queue_id -> pq_queues';

-- Keyed streams: a stream's rows, and a subscription's.
COMMENT ON TABLE stream_messages IS 'tenant: stream_id -> streams';
COMMENT ON TABLE stream_subscriptions IS 'tenant: stream_id -> streams';
COMMENT ON TABLE stream_pending IS 'tenant: sub_id -> stream_subscriptions';
COMMENT ON TABLE stream_sub_keys IS 'tenant: sub_id -> stream_subscriptions';
COMMENT ON TABLE stream_dead IS 'tenant: sub_id -> stream_subscriptions';

-- Durable streams.
COMMENT ON TABLE durable_producers IS 'tenant: stream_id -> durable_streams';
COMMENT ON TABLE durable_snapshots IS 'tenant: stream_id -> durable_streams';
COMMENT ON TABLE durable_snapshot_parts IS 'tenant: stream_id -> durable_streams';

-- Flows.
COMMENT ON TABLE flow_state IS 'tenant: query_id -> flow_queries';
COMMENT ON TABLE flow_hosted IS 'tenant: query_id -> flow_queries';

-- The work surface: a scope's rows, a queue's, a subscription's, a chunk stream's, a GDPR job's.
COMMENT ON TABLE work_schemas IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_routing_rules IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_hitl_patterns IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_acl_grants IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_queue_acl IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_trusted_scopes IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_journal_marks IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_streams IS 'tenant: scope_id -> work_scopes';
COMMENT ON TABLE work_queue_counters IS 'tenant: queue_id -> work_queues';
COMMENT ON TABLE work_claim_heads IS 'tenant: queue_id -> work_queues';
COMMENT ON TABLE work_deliveries IS 'tenant: subscription_id -> work_subscriptions';
COMMENT ON TABLE work_stream_chunks IS 'tenant: stream -> work_streams';
COMMENT ON TABLE work_gdpr_export_parts IS 'tenant: job_id -> work_gdpr_jobs';
COMMENT ON TABLE work_gdpr_export_files IS 'tenant: job_id -> work_gdpr_jobs';

-- The console's history: a row per resource of four kinds, each kind's id in its own table.
COMMENT ON TABLE history_minutes IS 'tenant: resource_id -> queues if kind = ''queue'';'
    ' resource_id -> work_queues if kind = ''work''; resource_id -> pq_queues if kind = ''partitioned'';'
    ' resource_id -> streams if kind = ''stream''';
