-- The directory of a deployment of several cells: which cell holds which tenant. Every cell has the
-- schema; the first cell's is the one consulted (the control database). A tenant with no row here
-- predates the directory and is on the first cell. Names are unique across cells here, as each
-- cell's `tenants` makes them unique within it.
CREATE SCHEMA control;

CREATE TABLE control.tenant_cells (
    tenant_id  uuid        PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    cell       text        NOT NULL,
    placed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX tenant_cells_cell ON control.tenant_cells (cell);

GRANT USAGE ON SCHEMA control TO postbox_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON control.tenant_cells TO postbox_app;
