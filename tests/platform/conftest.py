"""Fixtures of the platform tests: two cells (the session's database and a second one)."""

from __future__ import annotations

import pytest

from functions.keys import clear_cache
from postbox import directory
from support.cells import second_database, use_cells


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
