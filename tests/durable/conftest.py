"""Fixtures of the durable surface's tests, defined once."""

from __future__ import annotations

import pytest

from postbox import tenancy
from postbox.durable.model import Scope


@pytest.fixture
def scope(tenant) -> Scope:
    """Where the test tenant's durable streams live: its default project."""
    return Scope(tenant.tenant_id, tenancy.project_id(tenant.principal))
