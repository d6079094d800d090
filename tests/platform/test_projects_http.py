"""Projects over HTTP: a manage key creates them, keys list what they may work in, streams live in them."""

from __future__ import annotations

from support.http import client


def test_a_manage_key_creates_a_project_that_streams_can_use(api):
    assert api.post("/v1/streams", json={"name": "orders", "project": "payments"}).status_code == 404
    r = api.post("/v1/projects", json={"name": "payments"})
    assert r.status_code == 200 and r.json()["name"] == "payments" and r.json()["created"] is True
    assert api.post("/v1/streams", json={"name": "orders", "project": "payments"}).json()["project"] == "payments"
    names = [p["name"] for p in api.get("/v1/projects").json()["projects"]]
    assert names == ["default", "payments"]


def test_project_names_are_unique_and_ruled(api):
    api.post("/v1/projects", json={"name": "payments"})
    again = api.post("/v1/projects", json={"name": "payments"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "project_exists"
    for bad in ("", "x" * 65, "tab\there"):
        r = api.post("/v1/projects", json={"name": bad})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_name", (bad, r.text)
    assert api.post("/v1/projects", json={"name": "p", "extra": 1}).status_code == 400


def test_only_an_unbound_manage_key_creates_projects(api, gateway):
    tenant = api.tenant
    with client(gateway.url, tenant.key_for("write")) as writer:
        assert writer.post("/v1/projects", json={"name": "w"}).status_code == 403
        assert writer.get("/v1/projects").status_code == 200
    with client(gateway.url, tenant.key_for("manage", project="team")) as bound:
        assert bound.post("/v1/projects", json={"name": "other"}).status_code == 403
        assert [p["name"] for p in bound.get("/v1/projects").json()["projects"]] == ["team"]
    with client(gateway.url, None) as nobody:
        assert nobody.post("/v1/projects", json={"name": "n"}).status_code == 401
