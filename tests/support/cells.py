"""Two cells for a test: the session's database and a second database on the same server, migrated,
whose ids start far from the first's (as cells' ids do: they never meet)."""

from __future__ import annotations

import json
import uuid

import psycopg

from postbox import migrate
from support import database

SECOND_CELL_IDS_FROM = 10**12


def second_database(database_url: str) -> str:
    owner = database.OWNER_URL or database_url
    name = f"postbox_cell2_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(owner)
    info["dbname"] = name
    url = psycopg.conninfo.make_conninfo(**info)
    migrate.apply(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT setval(oid::regclass, %s) FROM pg_class WHERE relkind = 'S'", (SECOND_CELL_IDS_FROM,))
    return url


def cells_setting(first_url: str, second_url: str) -> str:
    return json.dumps([{"name": "cell-1", "database_url": first_url}, {"name": "cell-2", "database_url": second_url}])
