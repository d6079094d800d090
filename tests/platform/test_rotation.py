"""The secrets the migrate function fills and rotates (Secrets Manager in moto, the real database):
the app role's password follows its secret, and rotating the encryption key ring loses no message."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import uuid

import boto3
import pytest
from moto import mock_aws

from functions import migrate as migrate_function
from functions.local.lambda_context import LocalContext
from postbox import db
from postbox.partitioned import payloads, service
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest


@pytest.fixture
def aws_secrets(monkeypatch, database_url):
    """The two secrets, created without a value as the stack creates them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        app = sm.create_secret(Name=f"app-{uuid.uuid4().hex[:6]}")["ARN"]
        keys = sm.create_secret(Name=f"keys-{uuid.uuid4().hex[:6]}")["ARN"]
        monkeypatch.setenv("POSTBOX_APP_SECRET_ARN", app)
        monkeypatch.setenv("POSTBOX_ENCRYPTION_KEYS_SECRET_ARN", keys)
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        payloads.reset()
        yield sm, app, keys
    payloads.reset()


def _invoke(event: dict) -> dict:
    return migrate_function.handler(event, LocalContext("migrate", 60))


def _rotate(arn: str) -> str:
    token = str(uuid.uuid4())
    for step in ("createSecret", "setSecret", "testSecret", "finishSecret"):
        assert _invoke({"Step": step, "SecretId": arn, "ClientRequestToken": token}) == {"rotated": step}
    return token


def _current(sm, arn: str) -> str:
    return sm.get_secret_value(SecretId=arn, VersionStage="AWSCURRENT")["SecretString"]


def _password_matches(role: str, password: str) -> bool:
    """Check `password` against the role's SCRAM-SHA-256 verifier (the server trusts local logins
    here, so a login would prove nothing)."""
    with db.connection() as conn:
        stored = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()[0]
    method, rest = stored.split("$", 1)
    iterations_salt, keys = rest.split("$")
    iterations, salt = iterations_salt.split(":")
    stored_key = base64.b64decode(keys.split(":")[0])
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    return method == "SCRAM-SHA-256" and hashlib.sha256(client_key).digest() == stored_key


def test_the_first_migrate_run_fills_both_secrets_and_gives_the_roles_their_logins(aws_secrets):
    sm, app, keys = aws_secrets
    answer = _invoke({"action": "migrate"})
    assert answer["secrets"] == {"POSTBOX_APP_SECRET_ARN": "created", "POSTBOX_ENCRYPTION_KEYS_SECRET_ARN": "created"}
    login = json.loads(_current(sm, app))
    assert login["username"] == "postbox_app" and len(login["password"]) >= 30
    assert _password_matches("postbox_app", login["password"])
    ring = payloads.parse_ring(_current(sm, keys))
    assert list(ring.keys) == [ring.current]
    with db.connection() as conn:
        assert conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = 'postbox_listen'").fetchone()[0]
    # A second run keeps the values (and re-applies the same password).
    assert _invoke({"action": "migrate"})["secrets"] == {"POSTBOX_APP_SECRET_ARN": "applied"}
    assert json.loads(_current(sm, app)) == login and _password_matches("postbox_app", login["password"])


def test_rotating_the_app_secret_changes_the_roles_password(aws_secrets):
    sm, app, _ = aws_secrets
    _invoke({"action": "migrate"})
    before = json.loads(_current(sm, app))["password"]
    token = _rotate(app)
    after = json.loads(_current(sm, app))["password"]
    assert after != before
    assert _password_matches("postbox_app", after) and not _password_matches("postbox_app", before)
    stages = sm.describe_secret(SecretId=app)["VersionIdsToStages"]
    assert "AWSCURRENT" in stages[token]  # (Secrets Manager then drops AWSPENDING itself)
    _invoke({"Step": "finishSecret", "SecretId": app, "ClientRequestToken": token})  # a repeat is harmless


def test_rotating_the_encryption_keys_keeps_every_message_readable(aws_secrets, tenant):
    sm, _, keys = aws_secrets
    _invoke({"action": "migrate"})
    p = tenant.principal
    service.configure(p, "enc", {"encryptionEnabled": True})
    service.push(p, [Item("enc", {"n": n}) for n in range(3)])  # sealed with the first key
    first = payloads.parse_ring(_current(sm, keys))
    stale_ring = payloads.ring()

    _rotate(keys)
    second = payloads.parse_ring(_current(sm, keys))
    assert second.current != first.current and set(first.keys) < set(second.keys)  # old key kept
    payloads.reset()  # as each function does within RING_TTL_S
    service.push(p, [Item("enc", {"n": n}) for n in range(3, 6)])  # sealed with the new key
    assert payloads.seal(b"x")[2:2 + len(second.current)] == second.current.encode()  # new seals name the new key

    # A function still holding the old ring meets a message sealed with the new key: it re-reads the ring.
    payloads._ring = (float("inf"), stale_ring)
    popped = service.pop(p, PopRequest("enc", batch=10))
    assert [m["data"] for m in popped] == [{"n": n} for n in range(6)]


def test_envelopes_sealed_before_key_ids_open_with_the_legacy_key(monkeypatch):
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    legacy = secrets.token_bytes(32)
    nonce = secrets.token_bytes(12)
    old_envelope = b"\x01" + nonce + AESGCM(legacy).encrypt(nonce, b'{"old": true}', None)
    monkeypatch.setenv("POSTBOX_ENCRYPTION_KEY", base64.b64encode(legacy).decode())
    monkeypatch.setenv("POSTBOX_ENCRYPTION_KEYS", json.dumps(payloads.rotated(None)))
    payloads.reset()
    try:
        assert payloads.open_envelope(old_envelope) == b'{"old": true}'
        sealed = payloads.seal(b"new")
        assert sealed[:1] == b"\x02" and payloads.open_envelope(sealed) == b"new"
    finally:
        payloads.reset()
    assert "POSTBOX_ENCRYPTION_KEYS" in os.environ  # (monkeypatch restores it)
