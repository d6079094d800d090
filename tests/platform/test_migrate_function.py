"""The migrate function: migrations on deploy, and the operator actions that create tenants and keys."""

from __future__ import annotations

import json
import uuid

import boto3
import psycopg
import pytest
from moto import mock_aws

from functions.local.lambda_context import LocalContext
from functions.migrate import handler
from postbox import tenancy
from postbox.partitioned import payloads

CTX = LocalContext("migrate")


def test_deploy_invocation_applies_nothing_new(database_url):
    assert handler({"action": "migrate", "migrations_sha256": "abc"}, CTX) == {"applied": []}


def test_create_tenant_returns_a_working_manage_key(database_url):
    name = f"ops-{uuid.uuid4().hex[:8]}"
    out = handler({"action": "create-tenant", "name": name, "plan": "pro"}, CTX)
    principal = tenancy.resolve_key(out["key"])
    assert principal.tenant_id == out["tenant_id"] and principal.role == "manage"
    key = handler({"action": "create-key", "tenant": name, "role": "read"}, CTX)
    assert tenancy.resolve_key(key["key"]).role == "read"


def test_set_plan_puts_a_tenant_on_another_plan(database_url):
    name = f"ops-{uuid.uuid4().hex[:8]}"
    handler({"action": "create-tenant", "name": name}, CTX)
    assert handler({"action": "set-plan", "tenant": name, "plan": "pro"}, CTX)["plan"] == "pro"
    assert "no plan named" in handler({"action": "set-plan", "tenant": name, "plan": "gold"}, CTX)["error"]


def test_bad_actions_answer_an_error(database_url):
    assert "unknown action" in handler({"action": "drop-everything"}, CTX)["error"]
    assert "no tenant" in handler({"action": "create-key", "tenant": "nobody-here"}, CTX)["error"]
    assert "missing field" in handler({"action": "create-tenant"}, CTX)["error"]


# --- cells: the deploy's run per cell ------------------------------------------------------------


def _unapply_one_functions_file(url: str) -> str:
    """Forget one functions file's checksum on this cell, so that migrating it applies that file again."""
    with psycopg.connect(url, autocommit=True) as conn:
        (file,) = conn.execute("DELETE FROM schema_functions WHERE file = (SELECT min(file) FROM schema_functions)"
                               " RETURNING 'functions/' || file").fetchone()
    return file  # as a run reports it: functions/<file>


def test_a_run_naming_a_cell_migrates_that_cell_alone(two_cells):
    one, two = two_cells
    file = _unapply_one_functions_file(two)
    assert handler({"action": "migrate", "migrations_sha256": "abc", "cell": "cell-2"}, CTX) == {
        "cell": "cell-2", "applied": [file]}
    _unapply_one_functions_file(one)
    assert handler({"action": "migrate", "cell": "cell-2"}, CTX) == {"cell": "cell-2", "applied": []}
    assert handler({"action": "migrate", "cell": "cell-1"}, CTX) == {"cell": "cell-1", "applied": [file]}


def test_a_run_naming_no_cell_migrates_every_cell(two_cells):
    one, two = two_cells
    file = _unapply_one_functions_file(two)
    assert handler({"action": "migrate"}, CTX) == {"applied": {"cell-1": [], "cell-2": [file]}}


def test_a_run_naming_an_unknown_cell_fails_the_deploy(two_cells):
    with pytest.raises(ValueError, match="no cell named 'cell-9'; cells: cell-1, cell-2"):
        handler({"action": "migrate", "cell": "cell-9"}, CTX)


def test_a_cells_run_fills_its_own_app_secret_and_the_key_ring(two_cells, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        apps = {cell: sm.create_secret(Name=f"{cell}-app-{uuid.uuid4().hex[:6]}")["ARN"]
                for cell in ("cell-1", "cell-2")}
        keys = sm.create_secret(Name=f"keys-{uuid.uuid4().hex[:6]}")["ARN"]
        monkeypatch.setenv("POSTBOX_CELL_APP_SECRETS", json.dumps(apps))
        monkeypatch.setenv("POSTBOX_ENCRYPTION_KEYS_SECRET_ARN", keys)
        payloads.reset()
        try:
            answer = handler({"action": "migrate", "cell": "cell-2"}, CTX)
            assert answer["secrets"] == {"POSTBOX_APP_SECRET_ARN": "created",
                                         "POSTBOX_ENCRYPTION_KEYS_SECRET_ARN": "created"}
            assert "SecretString" not in sm.describe_secret(SecretId=apps["cell-1"])  # not its run
            assert not sm.list_secret_version_ids(SecretId=apps["cell-1"])["Versions"]
            assert json.loads(sm.get_secret_value(SecretId=apps["cell-2"])["SecretString"])["username"] == "postbox_app"
            # Rotating a cell's secret is a secret this function rotates, on that cell.
            token = str(uuid.uuid4())
            for step in ("createSecret", "setSecret", "testSecret", "finishSecret"):
                assert handler({"Step": step, "SecretId": apps["cell-2"], "ClientRequestToken": token}, CTX) == {
                    "rotated": step}
        finally:
            payloads.reset()
