-- Live moves of a tenant from one cell to another. The first cell's `control.tenant_moves` is the
-- one consulted (as for the directory): one row per move, its phase and progress, so a mover
-- killed at any step is continued by the next run. `tenant_move_changes` is kept on the SOURCE
-- cell: while a tenant moves, triggers the mover installs there log the keys of the tenant's rows
-- that change after they were copied, for the mover's catch-up passes to copy again.
CREATE TABLE control.tenant_moves (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   uuid        NOT NULL,
    source      text        NOT NULL,
    target      text        NOT NULL,
    phase       text        NOT NULL DEFAULT 'copying'
                CHECK (phase IN ('copying', 'catching_up', 'frozen', 'flipped', 'done')),
    copied      text[]      NOT NULL DEFAULT '{}',
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    frozen_at   timestamptz,
    flipped_at  timestamptz,
    finished_at timestamptz,
    report      jsonb       NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX tenant_moves_running ON control.tenant_moves (tenant_id) WHERE phase <> 'done';

CREATE TABLE control.tenant_move_changes (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    move_id  bigint NOT NULL,
    tbl      text   NOT NULL,
    key      jsonb  NOT NULL
);
CREATE INDEX tenant_move_changes_move ON control.tenant_move_changes (move_id, id);

-- The capture triggers run as whoever writes (the application role).
GRANT SELECT, INSERT ON control.tenant_move_changes TO postbox_app;
GRANT SELECT ON control.tenant_moves TO postbox_app;

COMMENT ON TABLE control.tenant_moves IS 'shared: the moves of tenants between cells (the first cell''s is the one read)';
COMMENT ON TABLE control.tenant_move_changes IS 'shared: the keys a move''s capture saw change on its source, until it drains';
