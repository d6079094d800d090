"""Receipt handles that cannot be forged: a handle names the message and the receive (its read
count) and carries an HMAC over them and the queue's id, keyed by a key derived from the payload key
ring (the server's secret: Secrets Manager on AWS, the state directory's ring locally). A handle
edited, made up, sealed with a key the ring never held or given for another queue is refused as
SQS refuses one (`ReceiptHandleIsInvalid`), so a caller can delete or hide only messages it received.

The handle is base64url of: version | key id length | key id | message id (8 bytes) | read count
(4 bytes) | the first 16 bytes of HMAC-SHA256(subkey, version | key id | queue id | message id |
read count). Naming its key id keeps a handle good across a rotation of the ring (every old key is
kept); the same receive sealed again gives the same handle, so a retried receive answers the same
handles.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import struct
import threading
import time
from typing import Any

from ..partitioned import payloads
from . import errors, mac

VERSION = b"\x01"
TAG_BYTES = 16
SUBKEY_LABEL = b"postbox sqs receipt handle v1"
RELOAD_EVERY_S = 60.0  # an unknown key id reads the ring again at most this often
_IDS = struct.Struct(">QI")  # message id, read count
_QUEUE = struct.Struct(">Q")
MIN_CHARS, MAX_CHARS = 20, 400
_reloaded_at = float("-inf")
_reload_lock = threading.Lock()


@functools.lru_cache(maxsize=64)
def _subkey(ring_key: bytes) -> mac.Mac:
    """A key for handles alone, derived from a ring key (never the key that seals payloads itself)."""
    return mac.Mac(hmac.digest(ring_key, SUBKEY_LABEL, hashlib.sha256))


def _tag(ring_key: bytes, head: bytes, queue_id: int, ids: bytes) -> bytes:
    return _subkey(ring_key).digest(head + _QUEUE.pack(queue_id) + ids)[:TAG_BYTES]


def seal(queue_id: int, msg_id: int, read_ct: int) -> str:
    """The handle of one receive of a message of a queue."""
    ring = payloads.ring()
    kid = ring.current.encode()
    head = VERSION + bytes([len(kid)]) + kid
    ids = _IDS.pack(msg_id, read_ct)
    raw = head + ids + _tag(ring.keys[ring.current], head, queue_id, ids)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def open_handle(handle: Any, queue_id: int) -> tuple[int, int]:
    """(message id, read count) of a handle sealed for this queue, else ReceiptHandleIsInvalid."""
    if not isinstance(handle, str) or not handle:
        raise errors.missing_parameter("ReceiptHandle")
    found = _opened(handle, queue_id)
    if found is None:
        raise errors.receipt_invalid(handle)
    return found


def _opened(handle: str, queue_id: int) -> tuple[int, int] | None:
    if not MIN_CHARS <= len(handle) <= MAX_CHARS:
        return None
    try:
        raw = base64.b64decode(handle + "=" * (-len(handle) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    if raw[:1] != VERSION or len(raw) < 2:
        return None
    end = 2 + raw[1]
    if len(raw) != end + _IDS.size + TAG_BYTES:
        return None
    kid = raw[2:end].decode("ascii", "replace")
    key = _ring_key(kid)
    ids = raw[end:end + _IDS.size]
    if key is None or not hmac.compare_digest(_tag(key, raw[:end], queue_id, ids), raw[end + _IDS.size:]):
        return None
    msg_id, read_ct = _IDS.unpack(ids)
    return (msg_id, read_ct) if 0 < msg_id < 2**63 else None


def _ring_key(kid: str) -> bytes | None:
    """The ring's key of that id; a id not in the ring reads the ring again (rotated elsewhere), at
    most once a minute, so made-up ids cannot make every request fetch the secret."""
    global _reloaded_at
    key = payloads.ring().keys.get(kid)
    if key is not None:
        return key
    with _reload_lock:
        if time.monotonic() - _reloaded_at < RELOAD_EVERY_S:
            return None
        _reloaded_at = time.monotonic()
    return payloads.reload_ring().keys.get(kid)
