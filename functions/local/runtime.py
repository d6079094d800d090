"""Bring up the local runtime's database: embedded (or DATABASE_URL), migrated, with a dev key."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from postbox import cells, config, db, directory, migrate, tenancy

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
    """Point this process's pool at `url`, its one cell, and apply pending migrations."""
    os.environ["DATABASE_URL"] = url
    os.environ.pop("POSTBOX_CELLS", None)
    config.reset()
    db.close_pool()
    return migrate.apply(url)


KEY_RING_SETTINGS = ("POSTBOX_ENCRYPTION_KEYS", "POSTBOX_ENCRYPTION_KEY", "POSTBOX_ENCRYPTION_KEYS_SECRET_ARN")


def use_key_ring(state_dir: Path) -> str | None:
    """The server's secret for this machine: the payload key ring (it seals encrypted payloads, SQS
    credentials' secrets and SQS receipt handles), kept in `state_dir/encryption-keys.json` and made
    on first start with a fresh current key, the fixed development key kept in it (as `legacy`) so
    that what was sealed before still opens. Given to this process and its workers as
    POSTBOX_ENCRYPTION_KEYS; a key or ring set in the environment is used instead (None)."""
    from postbox.partitioned import payloads

    if any(os.environ.get(name) for name in KEY_RING_SETTINGS):
        return None
    path = state_dir / "encryption-keys.json"
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        ring = payloads.rotated({"keys": {payloads.LEGACY: payloads.dev_key_b64()}})
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(json.dumps(ring) + "\n")
    document = path.read_text().strip()
    payloads.parse_ring(document)  # a damaged file stops the start, rather than sealing with no key
    os.environ["POSTBOX_ENCRYPTION_KEYS"] = document
    payloads.reset()
    return str(path)


def dev_key(state_dir: Path) -> str:
    """The development key in `state_dir/dev-key`, reused while valid, else freshly issued."""
    path = state_dir / "dev-key"
    if path.exists():
        key = path.read_text().strip()
        if tenancy.resolve_key(key) is not None:
            return key
    tenant = tenancy.tenant_id_by_name(DEV_TENANT) or tenancy.create_tenant(DEV_TENANT, plan="pro")
    with directory.at(tenant):
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
    with directory.at(tenant):
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
            target=invoke, args=(handler, {"queue_id": queue_id, "cell": cells.current().name}, "consumer-dispatch",
                                 60.0),
            name=f"dispatch-{queue_id}", daemon=True,
        ).start()

    consumers.set_starter(start)
