-- A multi-partition pop leases every partition it claims under one lease id (as Queen's pops do:
-- one lease renews, and acks name, all of them), so one lease id may be held by several cursors,
-- one per partition: the lease index is no longer unique.
DROP INDEX IF EXISTS log_cursors_lease;
CREATE INDEX log_cursors_lease ON log_cursors (lease_id) WHERE lease_id IS NOT NULL;
