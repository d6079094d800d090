"""SnapStart's hooks, run as Lambda's Python runtime runs them (`snapshot_restore_py`'s registries):
before the snapshot the pool and the LISTEN connection close; after a restore the database secret
is read afresh (not the snapshot's, cached for a minute), `random` draws anew, and the pool serves."""

from __future__ import annotations

import json
import random

import boto3
import psycopg
import pytest
import snapshot_restore_py
from moto import mock_aws

from functions import snapstart
from postbox import config, db, listener


@pytest.fixture
def registries(monkeypatch):
    """Empty hook registries and nothing registered yet, for this test alone."""
    monkeypatch.setattr(snapshot_restore_py, "_before_snapshot_registry", [])
    monkeypatch.setattr(snapshot_restore_py, "_after_restore_registry", [])
    monkeypatch.setattr(snapstart, "_registered", False)


def test_hooks_are_registered_only_for_a_snapshot(registries, monkeypatch):
    monkeypatch.delenv("AWS_LAMBDA_INITIALIZATION_TYPE", raising=False)
    assert snapstart.register() is False and snapshot_restore_py.get_after_restore() == []
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    assert snapstart.register() is True and snapstart.register() is True  # once
    assert [f for f, _, _ in snapshot_restore_py.get_before_snapshot()] == [snapstart.before_snapshot]
    assert [f for f, _, _ in snapshot_restore_py.get_after_restore()] == [snapstart.after_restore]


def test_a_function_registers_them_at_its_init(registries, monkeypatch):
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    from functions.observability import instrument

    instrument("snapstart-test")
    assert [f for f, _, _ in snapshot_restore_py.get_after_restore()] == [snapstart.after_restore]


def test_the_snapshot_closes_the_pool_and_the_restore_serves_again(registries, monkeypatch, database_url):
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    snapstart.register()
    before = db.pool()
    with db.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    held = listener.current()
    snapstart.run_before_snapshot()
    assert before.closed and listener.current() is not held  # the listener went with the pool
    snapstart.run_after_restore()
    assert db.pool() is not before and not db.pool().closed
    with db.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_restore_reads_the_secret_afresh_and_reseeds_random(registries, monkeypatch, database_url):
    """The secret is cached for SECRET_TTL_S (a minute): an environment restored from a snapshot taken
    before a rotation would log in with the old password for that minute."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("POSTBOX_DB_HOST", "proxy.example.internal")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    monkeypatch.setattr(db, "pool", lambda: None)  # no server behind this endpoint: the pool is not the point here
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        arn = sm.create_secret(Name="snap", SecretString=json.dumps({"username": "pb", "password": "old"}))["ARN"]
        monkeypatch.setenv("POSTBOX_DB_SECRET_ARN", arn)
        config.reset()
        snapstart.register()
        assert psycopg.conninfo.conninfo_to_dict(db.conninfo())["password"] == "old"
        snapstart.run_before_snapshot()
        sm.put_secret_value(SecretId=arn, SecretString=json.dumps({"username": "pb", "password": "new"}))
        state = random.getstate()
        snapstart.run_after_restore()
        assert random.getstate() != state
        assert psycopg.conninfo.conninfo_to_dict(db.conninfo())["password"] == "new"
    db.forget_credentials()


def test_a_restore_reads_the_payload_key_ring_afresh_with_new_aws_clients(registries, monkeypatch):
    """The key ring is cached for minutes: an environment restored after a rotation would seal new
    payloads with the snapshot's key until then, and call AWS with the snapshot's credentials."""
    from postbox import aws
    from postbox.partitioned import payloads

    for name in ("POSTBOX_ENCRYPTION_KEYS", "POSTBOX_ENCRYPTION_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    monkeypatch.setattr(db, "pool", lambda: None)  # the pool is not the point here
    with mock_aws():
        aws.reset()
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        first = payloads.rotated(None)
        arn = sm.create_secret(Name="ring", SecretString=json.dumps(first))["ARN"]
        monkeypatch.setenv("POSTBOX_ENCRYPTION_KEYS_SECRET_ARN", arn)
        payloads.reset()
        snapstart.register()
        assert payloads.ring().current == first["current"]
        snapshotted = aws.client("secretsmanager")
        snapstart.run_before_snapshot()
        second = payloads.rotated(first)
        sm.put_secret_value(SecretId=arn, SecretString=json.dumps(second))
        snapstart.run_after_restore()
        assert aws.client("secretsmanager") is not snapshotted
        assert payloads.ring().current == second["current"] != first["current"]
    payloads.reset()
    aws.reset()
