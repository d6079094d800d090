"""The local runtime's secret: a key ring kept in the state directory (made on first start, a fresh
current key, the development key kept for what was sealed before), so what it seals (SQS receipt
handles among them) cannot be made by someone who read the fixed development key in the source."""

from __future__ import annotations

import json
import os
import stat

import pytest

from functions.local import runtime
from postbox.partitioned import payloads
from postbox.sqs import errors, receipts


@pytest.fixture
def no_ring_set(monkeypatch):
    for name in runtime.KEY_RING_SETTINGS:  # set then removed, so monkeypatch restores what was there
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    yield
    monkeypatch.undo()
    payloads.reset()


def test_the_ring_is_made_once_in_the_state_dir(tmp_path, no_ring_set):
    dev_only = receipts.seal(7, 42, 1)  # what the fixed development key alone seals
    path = runtime.use_key_ring(tmp_path)
    assert path == str(tmp_path / "encryption-keys.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    ring = json.loads((tmp_path / "encryption-keys.json").read_text())
    assert ring["current"] != payloads.LEGACY and ring["keys"][payloads.LEGACY] == payloads.dev_key_b64()
    assert os.environ["POSTBOX_ENCRYPTION_KEYS"] == json.dumps(ring)

    handle = receipts.seal(7, 42, 1)
    assert handle != dev_only and receipts.open_handle(handle, 7) == (42, 1)
    assert receipts.open_handle(dev_only, 7) == (42, 1)  # sealed before: the development key is kept
    assert payloads.open_envelope(payloads.seal(b"x")) == b"x"
    runtime.use_key_ring(tmp_path)
    assert json.loads((tmp_path / "encryption-keys.json").read_text()) == ring  # reused, not made again

    os.environ["POSTBOX_ENCRYPTION_KEYS"] = json.dumps({"current": payloads.LEGACY,
                                                       "keys": {payloads.LEGACY: payloads.dev_key_b64()}})
    payloads.reset()
    with pytest.raises(errors.SqsError) as refused:  # the development key alone cannot make it
        receipts.open_handle(handle, 7)
    assert refused.value.kind == "ReceiptHandleIsInvalid"


def test_a_ring_or_key_in_the_environment_is_used_instead(tmp_path, no_ring_set, monkeypatch):
    monkeypatch.setenv("POSTBOX_ENCRYPTION_KEY", payloads.dev_key_b64())
    assert runtime.use_key_ring(tmp_path) is None
    assert not (tmp_path / "encryption-keys.json").exists()
