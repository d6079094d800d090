-- Tenancy: plans, tenants, projects (each tenant has a `default` one) and API keys (hashed).

CREATE TABLE plans (
    name              text PRIMARY KEY,
    max_queues        int    NOT NULL,
    messages_month    bigint NOT NULL,
    max_message_bytes int    NOT NULL,
    storage_bytes     bigint NOT NULL,
    retention_days    int    NOT NULL
);

INSERT INTO plans VALUES
    ('free',       25,    2000000,    262144,  2147483648,   7),
    ('pro',        500,   200000000,  1048576, 214748364800, 90),
    ('unlimited',  100000, 9000000000000000000, 1048576, 9000000000000000000, 365);

CREATE TABLE tenants (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text NOT NULL UNIQUE,
    plan       text NOT NULL DEFAULT 'free' REFERENCES plans(name),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE projects (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (tenant_id, name)
);

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    project_id   uuid REFERENCES projects(id) ON DELETE CASCADE,
    name         text NOT NULL DEFAULT '',
    prefix       text NOT NULL,
    key_hash     bytea NOT NULL UNIQUE,
    role         text NOT NULL CHECK (role IN ('read', 'write', 'manage', 'anon')),
    scopes       text[] NOT NULL DEFAULT '{}',
    expires_at   timestamptz,
    revoked_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

-- Usage a plan limits, kept as messages move. Slots spread concurrent writers over rows.
CREATE TABLE tenant_storage (
    tenant_id    uuid NOT NULL,
    slot         int  NOT NULL,
    stored_bytes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, slot)
) WITH (fillfactor = 70);

CREATE TABLE tenant_monthly_messages (
    tenant_id uuid NOT NULL,
    month     date NOT NULL,
    slot      int  NOT NULL,
    messages  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, month, slot)
) WITH (fillfactor = 70);
