"""Tenants, keys and migrations on real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from postbox import db, errors, migrate, tenancy


def test_keys_are_stored_hashed_and_resolve_to_their_principal(tenant):
    issued = tenancy.create_key(tenant.tenant_id, "write", project="billing", name="ci")
    with db.transaction() as conn:
        stored = conn.execute("SELECT key_hash, prefix FROM api_keys WHERE id = %s", (issued.key_id,)).fetchone()
    assert stored[0] == tenancy.hash_key(issued.key) and issued.key.encode() not in bytes(stored[0])
    assert stored[1] == issued.key[:10]
    p = tenancy.resolve_key(issued.key)
    assert p.tenant_id == tenant.tenant_id and p.role == "write" and p.project_id == issued.project_id


def test_revoked_expired_and_unknown_keys_do_not_resolve(tenant):
    issued = tenancy.create_key(tenant.tenant_id, "read")
    tenancy.revoke_key(issued.key_id)
    assert tenancy.resolve_key(issued.key) is None
    with pytest.raises(errors.NotFound):
        tenancy.revoke_key(issued.key_id)
    past = datetime.now(UTC) - timedelta(seconds=1)
    expired = tenancy.create_key(tenant.tenant_id, "read", expires_at=past)
    assert tenancy.resolve_key(expired.key) is None
    assert tenancy.resolve_key("pbx_unknown") is None and tenancy.resolve_key("") is None


def test_tenants_have_a_default_project_and_unique_names(tenant):
    with db.transaction() as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM projects WHERE tenant_id = %s", (tenant.tenant_id,))]
        tenant_name = conn.execute("SELECT name FROM tenants WHERE id = %s", (tenant.tenant_id,)).fetchone()[0]
    assert names == ["default"]
    with pytest.raises(errors.Conflict):
        tenancy.create_tenant(tenant_name)


def test_bad_role_is_refused(tenant):
    with pytest.raises(errors.Invalid):
        tenancy.create_key(tenant.tenant_id, "root")


def test_list_keys_shows_no_secrets(tenant):
    listed = tenancy.list_keys(tenant.tenant_id)
    assert listed and all("key_hash" not in k and "key" not in k for k in listed)


def test_migrations_are_recorded_and_idempotent(database_url):
    assert migrate.apply(database_url) == []
    with db.transaction() as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [v for v, _, _ in migrate.available()]
