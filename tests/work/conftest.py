"""Fixtures of the work surface's tests, defined once: a scope and a queue of the test's tenant.

Both are made through the domain (as the HTTP route would, with the tenant's own manage key) and
answered in their JSON form, so HTTP and domain tests read them alike.
"""

from __future__ import annotations

import json

import pytest

from postbox import db, jsoncodec
from postbox.work import queues, scopes


def _as_json(value):
    return json.loads(jsoncodec.dumps(value))


@pytest.fixture
def scope(tenant):
    """A scope whose subscriptions are dropped afterwards, so the agents (which sweep every tenant)
    find nothing of this test's in the next one."""
    made = _as_json(scopes.create_scope(tenant.principal, {"slug": "tests"}))
    yield made
    with db.connection() as conn:
        conn.execute("DELETE FROM work_subscriptions WHERE scope_id = %s", (made["id"],))


@pytest.fixture
def queue(tenant, scope):
    """A competing fifo queue `jobs` in that scope."""
    return _as_json(queues.create_queue(tenant.principal, scope["id"], {"slug": "jobs"}))


@pytest.fixture
def jobs(queue):
    """The same queue `jobs`, by the name the ACL tests give it beside `other`."""
    return queue


@pytest.fixture
def other(tenant, scope):
    """A second competing fifo queue, `other`, in that scope."""
    return _as_json(queues.create_queue(tenant.principal, scope["id"], {"slug": "other"}))
