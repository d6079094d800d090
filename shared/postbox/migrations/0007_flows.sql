-- Flows (`/streams/v1`): registered queries, their state shards (one per source partition), the
-- registration quota grants, and the queries hosted as a scheduled function.

CREATE TABLE flow_queries (
    id           uuid PRIMARY KEY,                 -- UUIDv7, the wire's query_id
    tenant_id    uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name         text NOT NULL,
    source_queue text NOT NULL,
    sink_queue   text,                             -- an empty string on the wire is stored as null
    config_hash  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (tenant_id, name)
);

-- Keys are compared byte-wise (COLLATE "C") so `key_prefix` reads are index range scans and rows
-- come back in the order the spec promises whatever the database's locale.
CREATE TABLE flow_state (
    query_id     uuid   NOT NULL REFERENCES flow_queries(id) ON DELETE CASCADE,
    partition_id bigint NOT NULL,                  -- log_partitions.id of the source partition
    key          text COLLATE "C" NOT NULL,
    value        jsonb  NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (query_id, partition_id, key)
);

-- Registration grants: a tenant other than the one named `default` registers new query names only
-- with an enabled row here; `max_queries` (when set) caps how many queries it may have.
CREATE TABLE flow_quotas (
    tenant_id   uuid PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    enabled     boolean NOT NULL DEFAULT true,
    max_queries int CHECK (max_queries IS NULL OR max_queries >= 0),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Hosted queries: the flows agent builds the query from `factory` (module:function) and runs one
-- bounded pass of the runner, idle flush included, even when no worker is up.
CREATE TABLE flow_hosted (
    query_id   uuid PRIMARY KEY REFERENCES flow_queries(id) ON DELETE CASCADE,
    factory    text NOT NULL,
    enabled    boolean NOT NULL DEFAULT true,
    last_run_at timestamptz,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
