"""Session fixtures: one embedded PostgreSQL for the whole run, the local gateway, fresh tenants."""

from __future__ import annotations

import os
import threading

import pytest

os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ.setdefault("POSTBOX_POOL_MAX", "16")
os.environ.setdefault("POSTBOX_LONG_POLL_MS", "3000")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from support.database import start_session_database  # noqa: E402
from support.http import GatewayServer, client  # noqa: E402
from support.tenants import TestTenant, new_tenant  # noqa: E402


@pytest.fixture(autouse=True)
def _settings_follow_the_environment():
    """A test that changes the environment (monkeypatch) leaves no settings read from it behind:
    `postbox.config` reads the environment once, and monkeypatch restores it after the test."""
    yield
    from postbox import config

    config.reset()


@pytest.fixture(scope="session")
def database_url():
    url, server = start_session_database()
    yield url
    from postbox import db

    db.close_pool()
    if server is not None:
        server.stop()


@pytest.fixture
def tenant(database_url) -> TestTenant:
    return new_tenant()


@pytest.fixture
def make_tenant(database_url):
    return new_tenant


@pytest.fixture(scope="session")
def gateway(database_url):
    server = GatewayServer().start()
    yield server
    server.stop()


@pytest.fixture
def api(gateway, tenant):
    """An HTTP client on the local gateway, authenticated as a fresh tenant's manage key."""
    with client(gateway.url, tenant.key) as c:
        c.tenant = tenant
        yield c


class NotifyOnly:
    """What the long polls of a test did: `woken` has one entry per sleep (True when a NOTIFY ended
    it); `asleep` is set once a long poll is asleep, listening, after its last empty try."""

    def __init__(self) -> None:
        self.woken: list[bool] = []
        self.asleep = threading.Event()

    def wait_until_asleep(self, timeout_s: float = 10.0) -> None:
        assert self.asleep.wait(timeout_s), "no long poll went to sleep"


@pytest.fixture
def notify_only(monkeypatch) -> NotifyOnly:
    """Long polls re-check only once a minute and every sleep is recorded, so a test that a write
    wakes a waiter fails unless the write's NOTIFY did the waking (a re-check at the deadline would
    also find the message)."""
    from postbox import wakeup

    seen = NotifyOnly()
    sleep = wakeup._sleep

    def recorded(conn, timeout_s):
        seen.asleep.set()
        seen.woken.append(sleep(conn, timeout_s))
        return seen.woken[-1]

    monkeypatch.setattr(wakeup, "RECHECK_SECONDS", 60.0)
    monkeypatch.setattr(wakeup, "_sleep", recorded)
    return seen
