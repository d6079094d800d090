"""The test session's PostgreSQL: an embedded server in a temporary folder, migrated once."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from functions.local.embedded import EmbeddedPostgres
from functions.local.runtime import use_database


def start_session_database() -> tuple[str, EmbeddedPostgres | None]:
    """TEST_DATABASE_URL if given (a server you run), else a fresh embedded server."""
    url = os.environ.get("TEST_DATABASE_URL")
    server = None
    if not url:
        root = Path(tempfile.mkdtemp(prefix="postbox-test-"))
        root.chmod(0o755)
        server = EmbeddedPostgres(root / "pgdata", keep=False, fast=True)
        url = server.ensure_database("postbox_test", fresh=True)
    use_database(url)
    return url, server
