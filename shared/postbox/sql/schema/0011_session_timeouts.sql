-- What the server bounds in every session of the functions' roles, as the roles' defaults: RDS
-- Proxy refuses the startup `options` that carry them to a server of your own, and pins a session
-- that SETs them. The values are `postbox.db.SESSION_SETTINGS` (which says why each; a test checks
-- that the two agree). The migrate function logs in as the master user: its statements stay
-- unbounded. Roles belong to the server: every database on it sees the same defaults.
ALTER ROLE postbox_app SET statement_timeout = '5min';
ALTER ROLE postbox_app SET lock_timeout = '20s';
ALTER ROLE postbox_app SET idle_in_transaction_session_timeout = '1min';
ALTER ROLE postbox_listen SET statement_timeout = '5min';
ALTER ROLE postbox_listen SET lock_timeout = '20s';
ALTER ROLE postbox_listen SET idle_in_transaction_session_timeout = '1min';
