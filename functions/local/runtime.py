"""Bring up the local runtime's database: embedded (or DATABASE_URL), migrated, with a dev key."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from postbox import config, db, migrate, tenancy

DEV_TENANT = "dev"


def database(state_dir: Path) -> tuple[str, object | None]:
    """DATABASE_URL when set, else an embedded server whose data lives in `state_dir/pgdata`."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url, None
    from functions.local.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(state_dir / "pgdata", keep=True)
    return server.ensure_database("postbox"), server


def use_database(url: str) -> list[str]:
    """Point this process's pool at `url` and apply pending migrations."""
    os.environ["DATABASE_URL"] = url
    config.reset()
    db.close_pool()
    return migrate.apply(url)


def dev_key(state_dir: Path) -> str:
    """The development key in `state_dir/dev-key`, reused while valid, else freshly issued."""
    path = state_dir / "dev-key"
    if path.exists():
        key = path.read_text().strip()
        if tenancy.resolve_key(key) is not None:
            return key
    tenant = tenancy.tenant_id_by_name(DEV_TENANT) or tenancy.create_tenant(DEV_TENANT, plan="pro")
    issued = tenancy.create_key(tenant, "manage", name="development key")
    state_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(issued.key + "\n")
    path.chmod(0o600)
    return issued.key


def dev_sqs_credential(state_dir: Path) -> dict:
    """The development tenant's SQS credential (manage) in `state_dir/dev-sqs-credential.json`, reused
    while it resolves, else freshly minted."""
    from postbox.sqs import credentials

    path = state_dir / "dev-sqs-credential.json"
    if path.exists():
        try:
            found = json.loads(path.read_text())
            if credentials.resolve(found["access_key_id"]) is not None:
                return found
        except (ValueError, KeyError, TypeError):
            pass
    tenant = tenancy.tenant_id_by_name(DEV_TENANT) or tenancy.create_tenant(DEV_TENANT, plan="pro")
    minted = credentials.mint(tenant, "manage", name="development SQS credential")
    state_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(minted) + "\n")
    path.chmod(0o600)
    return minted


def start_dispatches_in_process(handler: str = "functions.agents.consumer_dispatch.handler") -> None:
    """A send that finds its consumer idle starts the consumer-dispatch agent for its queue on a
    thread of this process, as the asynchronous Lambda invoke does on AWS."""
    from functions.local.invoke import invoke
    from postbox.queues import consumers

    def start(queue_id: int) -> None:
        threading.Thread(
            target=invoke, args=(handler, {"queue_id": queue_id}, "consumer-dispatch", 60.0),
            name=f"dispatch-{queue_id}", daemon=True,
        ).start()

    consumers.set_starter(start)
