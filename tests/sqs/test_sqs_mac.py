"""The HMAC that SigV4's signatures and receipt handles' seals use, with its key's pads hashed once,
is HMAC-SHA256 exactly (RFC 2104), for keys shorter than, as long as and longer than a block."""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest

from postbox.sqs import mac


@pytest.mark.parametrize("key_bytes", [0, 1, 32, 63, 64, 65, 200])
def test_it_is_hmac_sha256(key_bytes):
    key = os.urandom(key_bytes)
    for message in (b"", b"x", os.urandom(77), os.urandom(1000)):
        assert mac.Mac(key).digest(message) == hmac.digest(key, message, hashlib.sha256)
        assert mac.keyed(key).hexdigest(message) == hmac.new(key, message, hashlib.sha256).hexdigest()
