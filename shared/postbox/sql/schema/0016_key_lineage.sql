-- The keys a key descends from: the key that minted it, then that key's own lineage (nearest first;
-- empty for a key `postbox admin` made). Set once at the mint and never changed (a rotation keeps
-- the key's id), so a `deny` ACL entry naming a key binds every key minted from it.
ALTER TABLE api_keys ADD COLUMN lineage uuid[] NOT NULL DEFAULT '{}';
