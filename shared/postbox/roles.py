"""The database roles the functions log in as (created, without login, by the migrations).

`postbox_app` has DML on the tables and EXECUTE on the functions; `postbox_listen` may only
register long-poll waiters. On AWS the migrate function, which alone connects as the master user,
gives them their logins: `postbox_app` a password that Secrets Manager rotates (RDS Proxy logs in
with it, the functions reach the proxy with IAM tokens), `postbox_listen` IAM authentication
straight to the cluster, under a connection limit.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

APP = "postbox_app"
LISTEN = "postbox_listen"


def set_password(conn: psycopg.Connection, role: str, password: str) -> None:
    """Let `role` log in with `password` (ALTER ROLE takes no parameters: the password is quoted)."""
    conn.execute(
        sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password))
    )


def allow_iam_login(conn: psycopg.Connection, role: str, connection_limit: int) -> None:
    """Let `role` log in with IAM tokens (Aurora's `rds_iam` role), at most `connection_limit` at once.

    Outside RDS there is no `rds_iam`; the role then just gets its login and limit."""
    conn.execute(
        sql.SQL("ALTER ROLE {} WITH LOGIN CONNECTION LIMIT {}").format(
            sql.Identifier(role), sql.Literal(int(connection_limit))
        )
    )
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'rds_iam'").fetchone():
        conn.execute(sql.SQL("GRANT rds_iam TO {}").format(sql.Identifier(role)))


def can_log_in(conninfo: str) -> bool:
    """Whether `conninfo` opens a session (the rotation's test step)."""
    try:
        with psycopg.connect(conninfo, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False
