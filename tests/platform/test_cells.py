"""Cells: two databases of the session's server as two cells, tenants placed on each, requests and
agents routed to the tenant's cell, keys and SQS credentials found wherever their tenant is."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from functions.api.queues.app import handler as queues_handler
from functions.local.lambda_context import LocalContext
from postbox import cells, config, db, directory, tenancy
from postbox.agents import recorded
from postbox.errors import Conflict, Invalid, NotFound
from postbox.sqs import credentials
from support.events import api_event

CTX = LocalContext("queues")


def _holds(url: str, tenant_id: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0] == 1


def _name() -> str:
    return f"cell-test-{uuid.uuid4().hex[:10]}"


def test_without_cells_settings_there_is_one_cell_from_the_database_settings(database_url):
    (only,) = cells.all_cells()
    assert only.name == "cell-1" and only.database_url == database_url
    assert not cells.several()


def test_a_tenant_is_made_on_the_cell_an_admin_names_and_only_there(two_cells):
    one, two = two_cells
    tenant_id = tenancy.create_tenant(_name(), cell="cell-2")
    assert _holds(two, tenant_id) and not _holds(one, tenant_id)
    assert directory.cell_of(tenant_id).name == "cell-2"


def test_names_are_unique_across_cells(two_cells):
    name = _name()
    tenancy.create_tenant(name, cell="cell-2")
    with pytest.raises(Conflict):
        tenancy.create_tenant(name, cell="cell-1")
    with pytest.raises(Conflict):
        tenancy.create_tenant(name)


def test_an_unknown_cell_is_refused_by_name(two_cells):
    with pytest.raises(Invalid, match="no cell named 'cell-9'"):
        tenancy.create_tenant(_name(), cell="cell-9")


def test_a_new_tenant_goes_to_the_cell_with_the_fewest_tenants(two_cells):
    with cells.use("cell-1"), db.connection() as conn:  # what the rule counts: the directory's rows
        listed = dict(conn.execute("SELECT cell, count(*) FROM control.tenant_cells GROUP BY cell").fetchall())
    fewest = min(("cell-1", "cell-2"), key=lambda c: listed.get(c, 0))
    tenant_id = tenancy.create_tenant(_name())
    assert directory.cell_of(tenant_id).name == fewest


def test_a_key_and_an_sqs_credential_resolve_whichever_cell_holds_their_tenant(two_cells):
    tenant_id = tenancy.create_tenant(_name(), cell="cell-2")
    with directory.at(tenant_id):
        key = tenancy.create_key(tenant_id, "manage").key
        minted = credentials.mint(tenant_id, "manage")
    found = tenancy.resolve_key(key)
    assert found is not None and found.tenant_id == tenant_id
    credentials._cache.clear()
    credential = credentials.resolve(minted["access_key_id"])
    assert credential is not None and credential.principal.tenant_id == tenant_id
    assert tenancy.tenant_id_by_name(tenancy_name(tenant_id)) == tenant_id


def tenancy_name(tenant_id: str) -> str:
    with directory.at(tenant_id):
        name = tenancy.tenant_name(tenant_id)
    assert name is not None
    return name


def _call(event):
    answer = queues_handler(event, CTX)
    return answer["statusCode"], json.loads(answer["body"])


def test_a_request_runs_on_its_tenants_cell_and_sees_nothing_of_the_other(two_cells):
    one, two = two_cells
    near = tenancy.create_tenant(_name(), cell="cell-1")
    far = tenancy.create_tenant(_name(), cell="cell-2")
    near_key = tenancy.create_key(near, "manage").key
    with directory.at(far):
        far_key = tenancy.create_key(far, "manage").key
    assert _call(api_event("POST", "/api/v1/queues", key=far_key, body={"name": "orders"}))[0] == 201
    status, sent = _call(api_event("POST", "/api/v1/queues/orders/send", key=far_key, body={"message": {"n": 1}}))
    assert status == 201, sent
    with psycopg.connect(two) as conn:
        assert conn.execute("SELECT count(*) FROM queues WHERE tenant_id = %s AND name = 'orders'",
                            (far,)).fetchone()[0] == 1
    with psycopg.connect(one) as conn:
        assert conn.execute("SELECT count(*) FROM queues WHERE tenant_id = %s", (far,)).fetchone()[0] == 0
    # the other cell's tenant neither sees it nor reaches it, and makes its own of the same name
    assert _call(api_event("GET", "/api/v1/queues/orders", key=near_key))[0] == 404
    assert _call(api_event("POST", "/api/v1/queues/orders/read", key=near_key, body={"qty": 5}))[0] == 404
    assert _call(api_event("POST", "/api/v1/queues", key=near_key, body={"name": "orders"}))[0] == 201
    status, read = _call(api_event("POST", "/api/v1/queues/orders/read", key=far_key, body={"qty": 5}))
    assert status == 200 and [m["message"] for m in read["messages"]] == [{"n": 1}]
    assert cells.current().name == "cell-1"  # the request's routing ended with it


def test_an_agent_runs_on_every_cell_or_on_the_one_its_event_names(two_cells):
    ran: list[str] = []

    @recorded("cells-test-agent")
    def agent(event, context):
        ran.append(cells.current().name)
        return {"swept": 1}

    assert agent({}, None) == {"swept": 2}
    assert ran == ["cell-1", "cell-2"]
    ran.clear()
    assert agent({"cell": "cell-2"}, None) == {"swept": 1}
    assert ran == ["cell-2"]
    for url in two_cells:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT total_runs FROM agent_runs WHERE agent = 'cells-test-agent'").fetchone()[0] >= 1


def test_a_cell_whose_agent_run_fails_does_not_stop_the_others(two_cells):
    ran: list[str] = []

    @recorded("cells-test-failing")
    def agent(event, context):
        ran.append(cells.current().name)
        if cells.current().name == "cell-1":
            raise RuntimeError("cell-1 broke")
        return 1

    with pytest.raises(RuntimeError, match="cell-1 broke"):
        agent({}, None)
    assert ran == ["cell-1", "cell-2"]


@pytest.mark.parametrize("listed, problem", [
    ("not json", "not JSON"),
    ("[]", "non-empty"),
    ('[{"name": "Cell_1"}]', "taken or not"),
    ('[{"name": "a"}, {"name": "a"}]', "taken or not"),
    ('[{"name": "a", "host": "x"}]', "an object with a name"),
    ('[{"name": "a", "weight": 0}]', "weight"),
])
def test_a_malformed_cells_setting_stops_the_start_with_its_reason(monkeypatch, listed, problem):
    monkeypatch.setenv("POSTBOX_CELLS", listed)
    config.reset()
    with pytest.raises(RuntimeError, match=problem):
        cells.all_cells()


# ---- operators' commands on the tenant's cell ---------------------------------------------------------


def test_the_migrate_functions_actions_run_on_the_tenants_cell(two_cells):
    from functions.migrate import handler

    def migrate_handler(event: dict) -> dict:
        return handler(event, LocalContext("migrate"))

    _, two = two_cells
    name = _name()
    made = migrate_handler({"action": "create-tenant", "name": name, "cell": "cell-2"})
    assert made["cell"] == "cell-2" and tenancy.resolve_key(made["key"]).tenant_id == made["tenant_id"]
    another = migrate_handler({"action": "create-key", "tenant": name, "role": "read"})
    assert tenancy.resolve_key(another["key"]).tenant_id == made["tenant_id"]
    assert migrate_handler({"action": "set-plan", "tenant": name, "plan": "pro"})["plan"] == "pro"
    with psycopg.connect(two) as conn:
        assert conn.execute("SELECT plan FROM tenants WHERE id = %s", (made["tenant_id"],)).fetchone()[0] == "pro"
    listed = migrate_handler({"action": "cells"})["cells"]
    assert [c["name"] for c in listed] == ["cell-1", "cell-2"] and name in listed[1]["tenants"]
    refused = migrate_handler({"action": "create-tenant", "name": _name(), "cell": "cell-7"})
    assert "no cell named 'cell-7'" in refused["error"]


def test_operators_name_a_tenant_of_any_cell_by_name_or_id(two_cells):
    from postbox.flows import quotas

    _, two = two_cells
    name = _name()
    tenant_id = tenancy.create_tenant(name, cell="cell-2")
    for ref in (name, tenant_id):
        with tenancy.on_tenant(ref) as found:
            assert found == tenant_id and cells.current().name == "cell-2"
    with pytest.raises(NotFound):
        tenancy.tenant_id_of(str(uuid.uuid4()))
    assert tenancy.set_plan(tenant_id, "unlimited")["name"] == name
    assert quotas.grant(name, max_queries=3)["tenant_id"] == tenant_id
    assert {"tenant": name, "max_queries": 3}.items() <= {g["tenant"]: g for g in quotas.list_grants()}[name].items()
    assert quotas.revoke(tenant_id)["enabled"] is False
    with directory.at(tenant_id):
        key_id = tenancy.create_key(tenant_id, "read").key_id
    tenancy.revoke_key(key_id)  # found on cell-2, asked from cell-1
    with pytest.raises(NotFound):
        tenancy.revoke_key(key_id)
    with psycopg.connect(two) as conn:
        assert conn.execute("SELECT plan FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0] == "unlimited"
        assert conn.execute("SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = %s", (key_id,)).fetchone()[0]
