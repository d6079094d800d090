"""Fixtures of the platform tests: the session database as its owner; two cells (the session's
database and a second one)."""

from __future__ import annotations

import psycopg
import pytest

from functions.keys import clear_cache
from postbox import directory
from support import database as session_db
from support.cells import second_database, use_cells


@pytest.fixture
def owner(database_url):
    """The session database as its owner (who may create tables), in a transaction rolled back."""
    with psycopg.connect(session_db.OWNER_URL or database_url) as conn:
        yield conn
        conn.rollback()


@pytest.fixture(scope="session")
def second_cell_url(database_url):
    """A second database on the session's server, migrated: the second cell."""
    return second_database(database_url)


@pytest.fixture
def two_cells(database_url, second_cell_url, monkeypatch):
    """The deployment's cells are the session's database (cell-1) and the second one (cell-2)."""
    use_cells(monkeypatch, database_url, second_cell_url)
    yield database_url, second_cell_url
    directory.forget()
    clear_cache()
