"""Ours (not Queen's): the pytest plugin that runs Queen's vendored client suite against Postbox.

It stands in for the suite's two conftests (kept beside them as `conftest.py.queen`, not loaded):
their `client` fixture (a `Queen` on the broker), `queen_url`, and, instead of their session
cleanup of `test-%` queues through asyncpg, a fresh tenant — the wrapper
(tests/compat/test_queen_suite.py) creates one and serves the test session's gateway handlers to
this process on `QUEEN_URL` behind a front that holds the tenant's key, as Queen's own proxy holds
it for its clients, so the suite's tests (which pass no token) run unchanged.

`NOT_OFFERED` is the one list of Queen's tests that Postbox does not offer, each with why; every
other test of the suite is selected, and the wrapper asserts that each selected test passes.
"""

from __future__ import annotations

import os

import pytest
import pytest_asyncio

# path under tests/ (a file, or file::test) -> why Postbox does not offer it
NOT_OFFERED: dict[str, str] = {
    "test_auth.py": "Queen's server-stamped producer identity (issue #23): its tests call Queen's stored "
                    "procedures through asyncpg on Queen's own schema and sign JWTs with the broker's "
                    "JWT_SECRET; Postbox has neither that schema nor JWT auth (API keys per tenant)",
    "streams_unit": "unit tests of the client's streaming SDK against Queen's in-process fake server "
                    "(tests/streams_unit/fake_server.py): no broker is involved, so there is nothing "
                    "of Postbox to test",
}


def _not_offered(rel: str) -> str | None:
    for key, why in NOT_OFFERED.items():
        if rel == key or rel.startswith(key + "/") or rel.startswith(key + "::"):
            return why
    return None


def _relative(path) -> str:
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests")
    return os.path.relpath(str(path), root).replace(os.sep, "/")


def pytest_ignore_collect(collection_path, config):
    """Whole files and folders not offered are not even imported (test_auth.py needs asyncpg)."""
    rel = _relative(collection_path)
    for key in NOT_OFFERED:
        if "::" not in key and (rel == key or rel.startswith(key + "/")):
            return True
    return None


def pytest_collection_modifyitems(session, config, items):
    keep, drop = [], []
    for item in items:
        rel = _relative(item.path) + "::" + item.name
        (drop if _not_offered(rel) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def queen_url() -> str:
    url = os.environ.get("QUEEN_URL")
    if not url:
        pytest.exit("QUEEN_URL is not set: run this suite through tests/compat/test_queen_suite.py", 2)
    return url


@pytest_asyncio.fixture
async def client(queen_url):
    """A Queen client on the broker, as the suite's conftests make it (no token: the front holds the key)."""
    from queen import Queen

    q = Queen(queen_url)
    try:
        yield q
    finally:
        await q.close()
