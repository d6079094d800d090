-- Queue names deleted through SQS in the last minute: SQS refuses to create a queue of the same
-- name for 60 seconds after its deletion (QueueDeletedRecently). A row per name; DeleteQueue
-- removes its tenant's rows older than that minute.
CREATE TABLE sqs_deleted_queues (
    tenant_id  uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    project_id uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name       text NOT NULL,
    deleted_at timestamptz NOT NULL,
    PRIMARY KEY (project_id, name)
);
CREATE INDEX sqs_deleted_queues_tenant ON sqs_deleted_queues (tenant_id, deleted_at);
