"""Cells in tests: more databases on the session's server, migrated, named as cells of the deployment."""

from __future__ import annotations

import json
import uuid

import psycopg

from support import database


def empty_database(database_url: str, label: str) -> str:
    """A new, empty database on the session's server (made as the session's owner)."""
    owner = database.OWNER_URL or database_url
    name = f"postbox_{label}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(owner)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def new_database(database_url: str, label: str) -> str:
    """An empty database on the session's server, migrated."""
    from postbox import migrate

    url = empty_database(database_url, label)
    migrate.apply(url)
    return url


def second_database(database_url: str) -> str:
    """A second cell's database: its ids are its own once it is numbered (`cell_ids.number`)."""
    return new_database(database_url, "cell2")


def drop_database(database_url: str, url: str) -> None:
    owner = database.OWNER_URL or database_url
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))


def cells_setting(*urls: str) -> str:
    """POSTBOX_CELLS naming `urls` cell-1, cell-2, ..."""
    return json.dumps([{"name": f"cell-{i}", "database_url": url} for i, url in enumerate(urls, 1)])


def use_cells(monkeypatch, *urls: str) -> None:
    """The deployment's cells are `urls`, named cell-1, cell-2, ...; caches of the old ones dropped."""
    from functions.keys import clear_cache
    from postbox import config, directory

    monkeypatch.setenv("POSTBOX_CELLS", cells_setting(*urls))
    config.reset()
    directory.forget()
    clear_cache()
