-- How many of each kind of resource a tenant's plan allows, one column per limit (as `max_queues`
-- is for queues). A column's default is the free plan's figure, so a plan added without naming a limit
-- gets the free plan's; the other plans are set below. What each limit counts is defined once, in
-- the functions (plan_limit_used), and checked where each resource is created (plan_limit_check).
ALTER TABLE plans
    ADD COLUMN max_durable_streams     int NOT NULL DEFAULT 100   CHECK (max_durable_streams >= 0),
    ADD COLUMN max_keyed_streams       int NOT NULL DEFAULT 25    CHECK (max_keyed_streams >= 0),
    ADD COLUMN max_keyed_subscriptions int NOT NULL DEFAULT 50    CHECK (max_keyed_subscriptions >= 0),
    ADD COLUMN max_partitioned_queues  int NOT NULL DEFAULT 25    CHECK (max_partitioned_queues >= 0),
    ADD COLUMN max_flows               int NOT NULL DEFAULT 10    CHECK (max_flows >= 0),
    ADD COLUMN max_work_scopes         int NOT NULL DEFAULT 5     CHECK (max_work_scopes >= 0),
    ADD COLUMN max_work_queues         int NOT NULL DEFAULT 25    CHECK (max_work_queues >= 0),
    ADD COLUMN max_work_subscriptions  int NOT NULL DEFAULT 50    CHECK (max_work_subscriptions >= 0),
    ADD COLUMN max_webhooks            int NOT NULL DEFAULT 5     CHECK (max_webhooks >= 0),
    ADD COLUMN max_sqs_credentials     int NOT NULL DEFAULT 5     CHECK (max_sqs_credentials >= 0),
    ADD COLUMN max_api_keys            int NOT NULL DEFAULT 25    CHECK (max_api_keys >= 0);

UPDATE plans SET max_durable_streams = 10000, max_keyed_streams = 1000, max_keyed_subscriptions = 5000,
                 max_partitioned_queues = 1000, max_flows = 200, max_work_scopes = 100, max_work_queues = 1000,
                 max_work_subscriptions = 5000, max_webhooks = 200, max_sqs_credentials = 100,
                 max_api_keys = 1000
 WHERE name = 'pro';

UPDATE plans SET max_durable_streams = 1000000, max_keyed_streams = 100000, max_keyed_subscriptions = 100000,
                 max_partitioned_queues = 100000, max_flows = 100000, max_work_scopes = 100000,
                 max_work_queues = 100000, max_work_subscriptions = 100000, max_webhooks = 100000,
                 max_sqs_credentials = 100000, max_api_keys = 100000
 WHERE name = 'unlimited';

-- What the counts read: a tenant's rows of each kind, from an index (the other tables have one).
CREATE INDEX durable_streams_tenant ON durable_streams (tenant_id) WHERE NOT deleted;
CREATE INDEX work_queues_tenant ON work_queues (tenant_id) WHERE NOT is_system;
CREATE INDEX work_subscriptions_tenant ON work_subscriptions (tenant_id, delivery_mode);
