"""Message payloads: JSON bytes in the log, enveloped with AES-256-GCM on encrypted queues.

Keys live in a key ring: `{"current": "<id>", "keys": {"<id>": "<base64 of 32 bytes>", ...}}`, read
from POSTBOX_ENCRYPTION_KEYS (JSON) or, on AWS, from the Secrets Manager secret named by
POSTBOX_ENCRYPTION_KEYS_SECRET_ARN (re-read every few minutes). A sealed payload names the key
that sealed it, so rotating (a new current key, the old ones kept) never loses an old message.
POSTBOX_ENCRYPTION_KEY (one key) is still read: it seals when no ring is given, and it opens the
envelopes written before key ids existed. Locally (outside Lambda) a fixed development key stands
in when nothing is set (`postbox dev` sets a ring of its own, kept in its state directory); on
Lambda an encrypted queue without a key is a 503. The `cryptography` package is imported only when
a queue is encrypted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from typing import Any, NamedTuple

from .. import aws, config, jsoncodec
from ..errors import Unavailable

ENCRYPTED = b"\x01"  # record headers of an enveloped payload
_V1 = b"\x01"  # version | nonce(12) | ciphertext+tag, sealed with the one legacy key
_V2 = b"\x02"  # version | key id length | key id | nonce(12) | ciphertext+tag
_DEV_KEY = hashlib.sha256(b"postbox-development-encryption-key").digest()
LEGACY = "legacy"  # the key ring's name for POSTBOX_ENCRYPTION_KEY
RING_TTL_S = 300.0  # a rotated ring reaches every function within five minutes


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


class KeyRing(NamedTuple):
    current: str
    keys: dict[str, bytes]


def _key(raw: str, name: str) -> bytes:
    key = base64.b64decode(raw)
    if len(key) != 32:
        raise Unavailable(f"Encryption key {name!r} must be base64 of 32 bytes.")
    return key


def parse_ring(document: str | dict) -> KeyRing:
    """A key ring from its JSON form (as stored in the secret)."""
    doc = json.loads(document) if isinstance(document, str) else document
    keys = {kid: _key(raw, kid) for kid, raw in doc["keys"].items()}
    if doc["current"] not in keys:
        raise Unavailable("The encryption key ring's current key is not among its keys.")
    return KeyRing(doc["current"], keys)


def new_key_id() -> str:
    return "k" + secrets.token_hex(4)


def rotated(document: str | dict | None) -> dict:
    """The ring's JSON form with a fresh current key; every old key kept, to open old messages."""
    doc = (json.loads(document) if isinstance(document, str) else dict(document)) if document else {"keys": {}}
    kid = new_key_id()
    return {"current": kid, "keys": {**doc["keys"], kid: base64.b64encode(secrets.token_bytes(32)).decode()}}


def _load_ring() -> KeyRing:
    s = config.settings()
    document: str | None = s.encryption_keys
    arn = s.encryption_keys_secret_arn
    if arn and not document:
        try:  # only functions that seal or open on AWS make the client
            document = aws.client("secretsmanager").get_secret_value(
                SecretId=arn, VersionStage="AWSCURRENT")["SecretString"]
        except Exception as error:  # no value yet, no access, no network
            raise Unavailable(f"Payload encryption keys are unavailable ({type(error).__name__}).") from None
    legacy = s.encryption_key
    if document:
        ring = parse_ring(document)
        if legacy and LEGACY not in ring.keys:
            ring.keys[LEGACY] = _key(legacy, LEGACY)
        return ring
    if legacy:
        return KeyRing(LEGACY, {LEGACY: _key(legacy, LEGACY)})
    if s.on_lambda:
        raise Unavailable("Payload encryption is not configured (POSTBOX_ENCRYPTION_KEYS_SECRET_ARN).")
    return KeyRing(LEGACY, {LEGACY: _DEV_KEY})


_ring: tuple[float, KeyRing] | None = None
_ring_lock = threading.Lock()


def ring() -> KeyRing:
    global _ring
    cached = _ring
    if cached and cached[0] > time.monotonic():
        return cached[1]
    with _ring_lock:
        loaded = _load_ring()
        _ring = (time.monotonic() + RING_TTL_S, loaded)
        return loaded


def forget_ring() -> None:
    """Forget the cached key ring: the next seal or open reads it afresh."""
    global _ring
    _ring = None


def _aead(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as missing:  # pragma: no cover - depends on the deployment's layer
        raise Unavailable("Payload encryption needs the `cryptography` package.") from missing
    return AESGCM(key)


def seal(raw: bytes) -> bytes:
    """version 2 | key id length | key id | nonce(12) | ciphertext+tag, with the ring's current key."""
    keys = ring()
    kid = keys.current.encode()
    nonce = secrets.token_bytes(12)
    return _V2 + bytes([len(kid)]) + kid + nonce + _aead(keys.keys[keys.current]).encrypt(nonce, raw, None)


def open_envelope(stored: bytes) -> bytes:
    stored = bytes(stored)
    keys = ring()
    if stored[:1] == _V2:
        end = 2 + stored[1]
        kid = stored[2:end].decode()
        if kid not in keys.keys:
            keys = reload_ring()  # rotated elsewhere since this function last read the ring
        if kid not in keys.keys:
            raise Unavailable(f"Encryption key {kid!r} is not in the key ring.")
        return _aead(keys.keys[kid]).decrypt(stored[end:end + 12], stored[end + 12:], None)
    legacy = keys.keys.get(LEGACY) or (None if config.settings().on_lambda else _DEV_KEY)
    if legacy is None:
        raise Unavailable("This message was sealed with POSTBOX_ENCRYPTION_KEY, which is not set.")
    return _aead(legacy).decrypt(stored[1:13], stored[13:], None)


def reload_ring() -> KeyRing:
    """The key ring read again now (a key id not seen yet: rotated elsewhere)."""
    forget_ring()
    return ring()


def reset() -> None:
    """Forget the cached key ring and the settings it was read with (tests change the environment)."""
    config.reset()
    forget_ring()


def dev_key_b64() -> str:
    return base64.b64encode(_DEV_KEY).decode()
