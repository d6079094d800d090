"""Message payloads: JSON bytes in the log, enveloped with AES-256-GCM on encrypted queues.

The key is POSTBOX_ENCRYPTION_KEY (base64 of 32 bytes). Locally (outside Lambda) a fixed
development key stands in when it is unset; on Lambda an encrypted queue without a key is a 503.
The `cryptography` package is imported only when a queue is encrypted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from functools import lru_cache
from typing import Any

from .. import jsoncodec
from ..errors import Unavailable

ENCRYPTED = b"\x01"  # record headers of an enveloped payload
_VERSION = b"\x01"
_DEV_KEY = hashlib.sha256(b"postbox-development-encryption-key").digest()


def encode(payload: Any) -> bytes:
    return jsoncodec.dumps(payload)


def decode(stored: bytes, headers: bytes | None) -> Any:
    raw = open_envelope(stored) if headers == ENCRYPTED else stored
    return json.loads(raw)


def decode_many(stored: list[bytes], headers: list[bytes | None]) -> list[Any]:
    """decode() of a batch: plain JSON payloads are parsed as one array (one parser call for the
    lot); anything else, or a batch that does not split back into one value per payload, one by one."""
    if not any(headers):
        try:
            values = json.loads(b"[" + b",".join(stored) + b"]")
        except ValueError:
            values = None
        if isinstance(values, list) and len(values) == len(stored):
            return values
    return [decode(s, h) for s, h in zip(stored, headers, strict=True)]


@lru_cache(maxsize=1)
def _cipher() -> Any:
    raw = os.environ.get("POSTBOX_ENCRYPTION_KEY")
    if raw:
        key = base64.b64decode(raw)
        if len(key) != 32:
            raise Unavailable("POSTBOX_ENCRYPTION_KEY must be base64 of 32 bytes.")
    elif "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
        raise Unavailable("Payload encryption is not configured (POSTBOX_ENCRYPTION_KEY).")
    else:
        key = _DEV_KEY
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as missing:  # pragma: no cover - depends on the deployment's layer
        raise Unavailable("Payload encryption needs the `cryptography` package.") from missing
    return AESGCM(key)


def seal(raw: bytes) -> bytes:
    """version | nonce(12) | ciphertext+tag."""
    nonce = secrets.token_bytes(12)
    return _VERSION + nonce + _cipher().encrypt(nonce, raw, None)


def open_envelope(stored: bytes) -> bytes:
    return _cipher().decrypt(bytes(stored[1:13]), bytes(stored[13:]), None)


def reset() -> None:
    """Forget the cached key (tests change the environment)."""
    _cipher.cache_clear()


def dev_key_b64() -> str:
    return base64.b64encode(_DEV_KEY).decode()
