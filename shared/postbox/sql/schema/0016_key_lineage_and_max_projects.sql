-- The keys a key descends from: the key that minted it, then that key's own lineage (nearest first;
-- empty for a key `postbox admin` made). Set once at the mint and never changed (a rotation keeps
-- the key's id), so a `deny` ACL entry naming a key binds every key minted from it.
ALTER TABLE api_keys ADD COLUMN lineage uuid[] NOT NULL DEFAULT '{}';

-- How many projects a tenant's plan allows (its `default` project among them), as the other limits.
ALTER TABLE plans ADD COLUMN max_projects int NOT NULL DEFAULT 5 CHECK (max_projects >= 0);
UPDATE plans SET max_projects = 100 WHERE name = 'pro';
UPDATE plans SET max_projects = 100000 WHERE name = 'unlimited';
