"""Fixtures of the moves' tests: two cells, a tenant on the first with a key, a fast directory cache."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from functions.keys import clear_cache
from postbox import config, directory, tenancy
from support.cells import cells_setting, second_database


@pytest.fixture(scope="session")
def second_cell_url(database_url):
    return second_database(database_url)


@pytest.fixture
def two_cells(database_url, second_cell_url, monkeypatch):
    monkeypatch.setenv("POSTBOX_CELLS", cells_setting(database_url, second_cell_url))
    monkeypatch.setenv("POSTBOX_CELL_CACHE_SECONDS", "1")
    config.reset()
    directory.forget()
    clear_cache()
    yield database_url, second_cell_url
    directory.forget()
    clear_cache()


@dataclass
class Moving:
    id: str
    name: str
    key: str


@pytest.fixture
def moving(two_cells) -> Moving:
    name = f"move-{uuid.uuid4().hex[:10]}"
    tenant_id = tenancy.create_tenant(name, cell="cell-1")
    return Moving(tenant_id, name, tenancy.create_key(tenant_id, "manage").key)
