"""A queue's consumer can be only one of its tenant's own functions (`<prefix><tenant hex>-<name>`):
the queues API refuses another tenant's function (whose errors the queue's `last_error` would show),
the dispatcher never invokes a name stored before the rule, and on AWS each invoke goes through a
session tagged with the queue's tenant."""

from __future__ import annotations

import pytest

from functions.agents.consumer_invokers import choose_invoker, lambda_invoker, tenant_sessions
from postbox import config, db
from postbox.errors import Invalid
from postbox.queues import consumer_functions, consumers, service
from support import consumer_functions as fn

pytestmark = pytest.mark.usefixtures("local_function")


def test_another_tenants_consumer_function_is_refused_over_http(api, make_tenant):
    victim = make_tenant()
    theirs = fn.name_for(victim.tenant_id, "send-email")
    r = api.post("/api/v1/queues", json={"name": "steal", "consumer": {"function_name": theirs}})
    assert r.status_code == 400, r.text
    assert consumer_functions.prefix(api.tenant.tenant_id) in r.json()["detail"]  # it says what to name
    mine = fn.name_for(api.tenant.tenant_id, "send-email")
    assert api.post("/api/v1/queues", json={"name": "mine", "consumer": {"function_name": mine}}).status_code == 201
    r = api.patch("/api/v1/queues/mine", json={"consumer": {"function_name": theirs}})
    assert r.status_code == 400 and api.get("/api/v1/queues/mine").json()["consumer"]["function_name"] == mine


@pytest.mark.parametrize("name", [
    "postbox-consumer-send-email", "postbox-consumer-*", "send email", "x" * 15,
    "arn:aws:lambda:us-east-1:123456789012:function:send-email",
    "{mine}send-email:live", "{mine}", "{mine}a b", "{mine}" + "x" * 40, "{other}send-email",
    "{mine_upper}send-email",
])
def test_only_the_tenants_own_function_names_are_accepted(name, tenant, make_tenant):
    mine = consumer_functions.prefix(tenant.tenant_id)
    name = name.format(mine=mine, other=consumer_functions.prefix(make_tenant().tenant_id),
                       mine_upper=mine.upper())
    with pytest.raises(Invalid, match="this tenant's functions"):
        service.create_queue(tenant.principal, "jobs", {"consumer": {"function_name": name}})


def test_a_bare_name_as_the_spec_shows_it_is_the_tenants_own_function(tenant, make_tenant):
    """`send-email` (the queues API's own example) is kept as given and means the tenant's function
    `<prefix><tenant>-send-email`; another tenant's bare name means that tenant's own."""
    made = service.create_queue(tenant.principal, "emails", {"consumer": {"function_name": "send-email"}})
    assert made["consumer"]["function_name"] == "send-email"
    assert consumer_functions.function_of(tenant.tenant_id, "send-email") == fn.name_for(tenant.tenant_id, "send-email")
    assert consumer_functions.function_of(tenant.tenant_id, fn.name_for(tenant.tenant_id, "send-email")) \
        == fn.name_for(tenant.tenant_id, "send-email")
    other = make_tenant().tenant_id
    assert consumer_functions.function_of(other, "send-email") == fn.name_for(other, "send-email")


def test_a_bare_name_is_invoked_on_aws_by_the_tenants_whole_name(tenant):
    client = _FakeLambda()
    invoke = choose_invoker(lambda_client=client)
    invoke(tenant.tenant_id, "send-email", {"queue": "emails", "messages": []})
    assert client.invoked == [fn.name_for(tenant.tenant_id, "send-email")]


def test_a_pattern_set_by_the_deployment_names_the_functions(tenant, monkeypatch):
    monkeypatch.setenv("POSTBOX_CONSUMER_FUNCTION_PATTERN", "acme-fn-*")
    config.reset()
    hex_id = tenant.tenant_id.replace("-", "")
    service.create_queue(tenant.principal, "jobs", {"consumer": {"function_name": f"acme-fn-{hex_id}-x"}})
    with pytest.raises(Invalid):
        service.create_queue(tenant.principal, "jobs2", {"consumer": {"function_name": f"postbox-consumer-{hex_id}-x"}})


def test_a_foreign_function_stored_before_the_rule_is_never_invoked(tenant, make_tenant):
    service.create_queue(tenant.principal, "old", {"consumer": {"function_name": fn.name_for(tenant.tenant_id)}})
    theirs = fn.name_for(make_tenant().tenant_id)  # served by the same local callable: only the rule stops it
    with db.connection() as conn:
        conn.execute("UPDATE queues SET consumer = jsonb_set(consumer, '{function_name}', to_jsonb(%s::text))"
                     " WHERE tenant_id = %s AND name = 'old'", (theirs, tenant.tenant_id))
    service.send_messages(tenant.principal, "old", [1, 2])
    invoked = []
    queue = next(q for q in consumers.consumer_queues() if q.tenant_id == tenant.tenant_id)
    with db.connection() as conn:
        assert consumers.deliver_one_batch(conn, queue, lambda *call: invoked.append(call)) == 0
    assert invoked == []
    q = service.get_queue(tenant.principal, "old")
    assert "not one of this tenant's functions" in q["consumer"]["last_error"]
    assert q["metrics"]["visible"] == 2  # nothing was claimed for it


class _FakeSts:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def assume_role(self, **kwargs):
        self.calls.append(kwargs)
        n = len(self.calls)
        return {"Credentials": {"AccessKeyId": f"AK{n}", "SecretAccessKey": f"SK{n}", "SessionToken": f"ST{n}"}}


class _FakeLambda:
    def __init__(self, **credentials) -> None:
        self.credentials, self.invoked = credentials, []

    def invoke(self, **kwargs):
        self.invoked.append(kwargs["FunctionName"])
        return {"StatusCode": 200}


def test_on_aws_each_tenant_invokes_through_its_own_tagged_session():
    a, b = "0f3a3c1e-5d2b-4c8e-9a71-2b6f0d4e8c11", "7b1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    sts, made = _FakeSts(), []

    def make_client(service_name, **credentials):
        assert service_name == "lambda"
        made.append(_FakeLambda(**credentials))
        return made[-1]

    invoke = lambda_invoker(client_for=tenant_sessions("arn:aws:iam::1:role/invoker", sts, make_client))
    invoke(a, fn.name_for(a), {"queue": "q", "messages": []})
    invoke(a, fn.name_for(a, "other"), {"queue": "q", "messages": []})
    invoke(b, fn.name_for(b), {"queue": "q", "messages": []})
    assert [c["Tags"] for c in sts.calls] == [[{"Key": "postbox-tenant", "Value": a.replace("-", "")}],
                                              [{"Key": "postbox-tenant", "Value": b.replace("-", "")}]]
    assert all(c["RoleArn"] == "arn:aws:iam::1:role/invoker" for c in sts.calls)
    assert [m.credentials["aws_session_token"] for m in made] == ["ST1", "ST2"]  # one session per tenant, kept
    assert made[0].invoked == [fn.name_for(a), fn.name_for(a, "other")] and made[1].invoked == [fn.name_for(b)]


def test_with_the_invoker_role_configured_the_dispatcher_uses_tenant_sessions(monkeypatch):
    monkeypatch.setenv("POSTBOX_CONSUMER_INVOKER_ROLE_ARN", "arn:aws:iam::1:role/invoker")
    config.reset()
    used = []
    monkeypatch.setattr("functions.agents.consumer_invokers.tenant_sessions",
                        lambda role_arn, **options: used.append(role_arn) or (lambda tenant_id: _FakeLambda()))
    lambda_invoker()("0f3a3c1e-5d2b-4c8e-9a71-2b6f0d4e8c11", "f", {})
    assert used == ["arn:aws:iam::1:role/invoker"]
