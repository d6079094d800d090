"""A `pb` fixture: the Python client on the local gateway, as a fresh tenant's manage key."""

from __future__ import annotations

import pytest

from postbox_client import Client


@pytest.fixture
def pb(gateway, tenant):
    with Client(gateway.url, tenant.key) as c:
        c.tenant = tenant
        yield c
