"""SQS credentials are held to the rule of every key operation: a key mints, lists and revokes only
credentials whose role, project and expiry are within its own (a table through the domain, and the
queues surface's answers over HTTP); a credential that expires is refused by the SigV4 check."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from postbox import db, tenancy
from postbox.errors import Forbidden, Invalid, NotFound, Unprocessable
from postbox.sqs import credentials
from support.http import client

MOUNT = "/api/v1/sqs/credentials"


def key(tenant, role: str = "manage", project: str | None = None, days: int | None = None):
    """(plain key, principal) of a new tenant key; one that expires does so in `days` days."""
    expires = datetime.now().astimezone() + timedelta(days=days) if days else None
    issued = tenancy.create_key(tenant.tenant_id, role, project=project, expires_at=expires)
    return issued.key, tenancy.resolve_key(issued.key)


def project_name(project_id: str) -> str:
    with db.connection() as conn:
        return conn.execute("SELECT name FROM projects WHERE id = %s", (project_id,)).fetchone()[0]


# ---- every field against every rule ------------------------------------------------------------

@pytest.mark.parametrize(("role", "allowed"), [("write", True), ("read", True), ("manage", False)])
def test_role(tenant, role, allowed):
    _, caller = key(tenant, "write")
    if allowed:
        assert credentials.mint(tenant.tenant_id, role, caller=caller)["role"] == role
    else:
        with pytest.raises(Forbidden) as refused:
            credentials.mint(tenant.tenant_id, role, caller=caller)
        assert refused.value.details == {"field": "role"} and "above this key's role (write)" in refused.value.message


@pytest.mark.parametrize(("named", "allowed"), [(None, True), ("web", True), ("elsewhere", False),
                                                ("default", False)])
def test_project(tenant, named, allowed):
    _, caller = key(tenant, project="web")
    if allowed:  # none named: the caller's own project
        assert credentials.mint(tenant.tenant_id, project=named, caller=caller)["project_id"] == caller.project_id
        return
    with pytest.raises(Forbidden) as refused:
        credentials.mint(tenant.tenant_id, project=named, caller=caller)
    assert refused.value.details == {"field": "project"}
    assert named not in {p["name"] for p in tenancy.list_projects(tenant.tenant_id)} - {"default"}  # not made


@pytest.mark.parametrize("named", ["x" * 65, "bad\x01name", "tab\there"])
def test_a_project_made_by_naming_it_keeps_the_project_name_rule(tenant, named):
    with pytest.raises(Invalid) as refused:
        credentials.mint(tenant.tenant_id, project=named)
    assert "project" in refused.value.message
    with pytest.raises(Invalid):
        tenancy.create_key(tenant.tenant_id, "write", project=named)
    assert {p["name"] for p in tenancy.list_projects(tenant.tenant_id)} == {"default"}


def test_a_key_of_no_project_mints_for_any(tenant):
    _, caller = key(tenant)
    minted = credentials.mint(tenant.tenant_id, project="elsewhere", caller=caller)
    assert project_name(minted["project_id"]) == "elsewhere"
    assert credentials.mint(tenant.tenant_id, caller=caller)["project_id"] is None  # the tenant's default


@pytest.mark.parametrize(("case", "allowed"), [("equal", True), ("narrower", True), ("wider", False),
                                               ("absent", False)])
def test_expiry(tenant, case, allowed):
    _, caller = key(tenant, days=10)
    expiry = {"equal": {"expires_at": caller.expires_at}, "narrower": {"expires_in_days": 9},
              "wider": {"expires_at": caller.expires_at + timedelta(microseconds=1)}, "absent": {}}[case]
    if allowed:
        minted = credentials.mint(tenant.tenant_id, caller=caller, **expiry)
        assert datetime.fromisoformat(minted["expires_at"]) <= caller.expires_at
        return
    with pytest.raises(Forbidden) as refused:
        credentials.mint(tenant.tenant_id, caller=caller, **expiry)
    assert refused.value.details == {"field": "expires_at"}
    assert credentials.list_credentials(tenant.tenant_id) == []


def test_an_expiry_is_later_than_now_and_given_once(tenant):
    for expiry in ({"expires_at": "2001-01-01T00:00:00+00:00"},
                   {"expires_at": "2099-01-01T00:00:00+00:00", "expires_in_days": 1}):
        with pytest.raises(Unprocessable):
            credentials.mint(tenant.tenant_id, **expiry)


def test_postbox_admin_mints_anything(tenant):
    minted = credentials.mint(tenant.tenant_id, "manage", project="anywhere")
    assert minted["expires_at"] is None and minted["role"] == "manage"


# ---- revoke and list: only credentials within the caller's power ---------------------------------

def test_revoke_and_list_within_power(tenant, make_tenant):
    _, caller = key(tenant, project="web", days=10)
    mine = credentials.mint(tenant.tenant_id, project="web", expires_in_days=5)
    forever = credentials.mint(tenant.tenant_id, project="web")
    default = credentials.mint(tenant.tenant_id, expires_in_days=5)
    theirs = credentials.mint(make_tenant().tenant_id, project="web", expires_in_days=5)
    assert [c["access_key_id"] for c in credentials.list_credentials(tenant.tenant_id, caller)] == \
        [mine["access_key_id"]]
    assert len(credentials.list_credentials(tenant.tenant_id)) == 3  # postbox admin sees all
    for other, field in ((forever, "expires_at"), (default, "project")):
        with pytest.raises(Forbidden) as refused:
            credentials.revoke(tenant.tenant_id, other["access_key_id"], caller)
        assert refused.value.details == {"field": field}
    with pytest.raises(NotFound):  # another tenant's looks missing
        credentials.revoke(tenant.tenant_id, theirs["access_key_id"], caller)
    assert credentials.revoke(tenant.tenant_id, mine["access_key_id"], caller) == {"revoked": mine["access_key_id"]}
    revoked = {c["access_key_id"]: c["revoked_at"] for c in credentials.list_credentials(tenant.tenant_id)}
    assert revoked[mine["access_key_id"]] and not revoked[forever["access_key_id"]]
    assert not revoked[default["access_key_id"]]


# ---- over HTTP: the queues surface's 403 names the field ---------------------------------------

def test_over_http(gateway, tenant):
    plain, _ = key(tenant, project="web", days=10)
    with client(gateway.url, plain) as api:
        r = api.post(MOUNT, json={"project": "elsewhere"})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "forbidden"
        assert "project" in r.json()["detail"]["message"]
        r = api.post(MOUNT, json={"project": "web", "expires_in_days": 11})
        assert r.status_code == 403 and "expires_at" in r.json()["detail"]["message"]
        minted = api.post(MOUNT, json={"project": "web", "expires_in_days": 9, "name": "ci"})
        assert minted.status_code == 201, minted.text
        assert minted.json()["expires_at"] is not None
        forever = credentials.mint(tenant.tenant_id, project="web")
        r = api.delete(f"{MOUNT}/{forever['access_key_id']}")
        assert r.status_code == 403 and "expires_at" in r.json()["detail"]["message"]
        listed = api.get(MOUNT).json()["credentials"]
        assert [(c["name"], c["project"]) for c in listed] == [("ci", "web")]
        assert api.post(MOUNT, json={"expires_at": "2099-01-01T00:00:00"}).status_code == 422  # no offset
        assert api.post(MOUNT, json={"expires_at": "2001-01-01T00:00:00Z"}).status_code == 422
    with client(gateway.url, tenant.key) as api:  # the full-power key
        assert api.delete(f"{MOUNT}/{forever['access_key_id']}").status_code == 200
        assert api.post(MOUNT, json={"project": "elsewhere"}).status_code == 201
