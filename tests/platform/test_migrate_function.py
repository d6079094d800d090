"""The migrate function: migrations on deploy, and the operator actions that create tenants and keys."""

from __future__ import annotations

import uuid

from functions.local.lambda_context import LocalContext
from functions.migrate import handler
from postbox import tenancy

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
