"""The domain's one port to AWS: boto3 clients by service, made on first use and kept for the
process (a Lambda container reuses them across invocations).

boto3 is imported on the first call, never at import: a cold start that needs no AWS call (most
requests, and everything locally) never loads it. Clients are made in the region of `postbox.config`
unless asked for another. Tests that start moto after a client was made call `reset()` (clients are
made at first use, so moto intercepts them).
"""

from __future__ import annotations

import threading
from typing import Any

from . import config

_clients: dict[tuple[str, str | None, str | None, str | None], Any] = {}
_lock = threading.Lock()


def client(service: str, *, region: str | None = None, signature_version: str | None = None,
           endpoint_url: str | None = None) -> Any:
    """The process's client of `service` (`secretsmanager`, `s3`, `lambda`, `rds`, …), in `region`
    (else the deployment's), through `endpoint_url` when the region's usual one is out of reach (a
    cell's region, from a VPC peered with its own)."""
    key = (service, region or config.settings().region, signature_version, endpoint_url)
    made = _clients.get(key)
    if made is None:
        with _lock:
            made = _clients.get(key)
            if made is None:
                import boto3  # here: only the first AWS call of a container pays for it

                options: dict[str, Any] = {}
                if signature_version:
                    from botocore.config import Config

                    options["config"] = Config(signature_version=signature_version)
                if endpoint_url:
                    options["endpoint_url"] = endpoint_url
                made = _clients[key] = boto3.client(service, region_name=key[1], **options)
    return made


def reset() -> None:
    """Forget every client (tests change the environment or start moto)."""
    with _lock:
        _clients.clear()
