"""Plan limits on every kind of resource a tenant creates, over HTTP through the local gateway: up to
the limit each creation lands, the next is the surface's 4xx naming the limit (SQS's OverLimit on
the SQS face), creations racing at the edge end with exactly the limit made, and deleting one frees
a place (where it can be deleted). Each test's tenant is on a plan of its own: the `pro` plan with
one limit made small."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from postbox import db, limits, tenancy
from postbox.errors import LimitExceeded
from postbox.flows import quotas
from postbox.sqs import credentials
from postbox.work import subscriptions as work_subscriptions
from support import tenants
from support.http import client
from support.tenants import new_tenant

W = "/v1/modules/scaiqueue"
SMALL = 3  # the limit of the sequential tests
RACE_LIMIT, RACERS = 4, 12


def plan_with(limit: str, value: int) -> str:
    """A plan of its own: `pro` with `limit` set to `value`."""
    name = f"limits-{uuid.uuid4().hex[:10]}"
    with db.transaction() as conn:
        conn.execute("INSERT INTO plans SELECT (jsonb_populate_record(p, jsonb_build_object('name', %s::text, %s::text,"
                     " %s::int))).* FROM plans p WHERE p.name = 'pro'", (name, limit, value))
    return name


@dataclass
class Answer:
    """A creation's answer as a test reads it: the status, the code it names, its whole text, and
    what deleting the resource takes."""
    status: int
    code: str | None = None
    text: str = ""
    made: Any = None


def http_answer(r: httpx.Response, code: Callable[[Any], str | None], made: Callable[[Any], Any] = lambda b: None
                ) -> Answer:
    body = r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None
    if r.status_code >= 400:
        return Answer(r.status_code, code(body) if body is not None else None, r.text)
    return Answer(r.status_code, None, r.text, made(body))


@dataclass
class Kind:
    """One way a tenant makes a resource a plan counts: `create(c, ctx, i)` makes the i-th,
    `delete(c, ctx, i, made)` removes it (None: it cannot be deleted), `setup(c, tenant)` makes what
    they need first (a scope, a stream) and answers their context; `refusal` is the status and code
    of one too many; `uses` names what the tenant already holds of the kind."""
    id: str
    limit: str
    create: Callable[[httpx.Client, Any, int], Answer]
    delete: Callable[[httpx.Client, Any, int, Any], None] | None
    refusal: tuple[int, str]
    setup: Callable[[httpx.Client, tenants.TestTenant], Any] = lambda c, t: None
    uses: list[str] = field(default_factory=list)


def _ok(r: httpx.Response, *statuses: int) -> httpx.Response:
    assert r.status_code in (statuses or (200, 201, 204)), r.text
    return r


# ---- queues API and SQS ------------------------------------------------------------------------------


def _queues_code(body):
    return body["detail"]["code"] if isinstance(body.get("detail"), dict) else None


QUEUES = Kind(
    "queues", limits.QUEUES,
    create=lambda c, ctx, i: http_answer(c.post("/api/v1/queues", json={"name": f"q{i}"}), _queues_code),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/api/v1/queues/q{i}")),
    refusal=(403, "max_queues"),
)


def _sqs_client(c: httpx.Client, tenant: tenants.TestTenant):
    credential = credentials.mint(tenant.tenant_id, "manage")
    return boto3.session.Session().client(
        "sqs", endpoint_url=str(c.base_url.join("/sqs")), region_name="us-east-1",
        aws_access_key_id=credential["access_key_id"], aws_secret_access_key=credential["secret_access_key"],
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=60))


def _sqs_create(c, sqs, i: int) -> Answer:
    try:
        url = sqs.create_queue(QueueName=f"sq{i}")["QueueUrl"]
    except ClientError as e:
        error = e.response["Error"]
        return Answer(e.response["ResponseMetadata"]["HTTPStatusCode"], error["Code"], error.get("Message", ""))
    return Answer(200, made=url)


SQS_QUEUES = Kind(
    "sqs-queues", limits.QUEUES, setup=_sqs_client, create=_sqs_create,
    delete=lambda c, sqs, i, url: sqs.delete_queue(QueueUrl=url),
    refusal=(403, "OverLimit"),  # SQS's code for an action over a limit; the message names max_queues
)

SQS_CREDENTIALS = Kind(
    "sqs-credentials", limits.SQS_CREDENTIALS,
    create=lambda c, ctx, i: http_answer(c.post("/api/v1/sqs/credentials", json={"role": "read"}), _queues_code,
                                         lambda b: b["access_key_id"]),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/api/v1/sqs/credentials/{made}")),
    refusal=(403, "max_sqs_credentials"),
)


# ---- streams ---------------------------------------------------------------------------------------


def _error_code(body):
    return body["error"]["code"] if isinstance(body.get("error"), dict) else None


DURABLE_STREAMS = Kind(
    "durable-streams", limits.DURABLE_STREAMS,
    create=lambda c, ctx, i: http_answer(
        c.put(f"/v1/stream/d{i}", headers={"content-type": "application/octet-stream"}), _error_code),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/v1/stream/d{i}")),
    refusal=(403, "MAX_DURABLE_STREAMS"),
)

KEYED_STREAMS = Kind(
    "keyed-streams", limits.KEYED_STREAMS,
    create=lambda c, ctx, i: http_answer(c.post("/v1/streams", json={"name": f"k{i}"}), _error_code),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/v1/streams/k{i}")),
    refusal=(403, "max_keyed_streams"),
)

KEYED_STREAMS_BY_PUBLISH = Kind(  # a publish to a stream that does not exist yet creates it
    "keyed-streams-by-publish", limits.KEYED_STREAMS,
    create=lambda c, ctx, i: http_answer(c.post(f"/v1/streams/k{i}/messages", json={"payload": i}), _error_code),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/v1/streams/k{i}")),
    refusal=(403, "max_keyed_streams"),
)

KEYED_SUBSCRIPTIONS = Kind(
    "keyed-subscriptions", limits.KEYED_SUBSCRIPTIONS,
    setup=lambda c, t: _ok(c.post("/v1/streams", json={"name": "s"})),
    create=lambda c, ctx, i: http_answer(c.post("/v1/streams/s/subscriptions", json={"name": f"w{i}"}), _error_code),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/v1/streams/s/subscriptions/w{i}")),
    refusal=(403, "max_keyed_subscriptions"),
)


# ---- partitioned queues and flows ------------------------------------------------------------------


def _message_naming(limit: str):
    """Queen's `{"error": message}` names the limit in its message."""
    return lambda body: limit if limit in str(body.get("error")) else None


PARTITIONED_BY_PUSH = Kind(  # a push to a queue that does not exist yet creates it
    "partitioned-queues-by-push", limits.PARTITIONED_QUEUES,
    create=lambda c, ctx, i: http_answer(
        c.post("/api/v1/push", json={"items": [{"queue": f"p{i}", "partition": "a", "payload": i}]}),
        _message_naming(limits.PARTITIONED_QUEUES)),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/api/v1/resources/queues/p{i}")),
    refusal=(403, limits.PARTITIONED_QUEUES),
)

PARTITIONED_BY_CONFIGURE = Kind(
    "partitioned-queues-by-configure", limits.PARTITIONED_QUEUES,
    create=lambda c, ctx, i: http_answer(c.post("/api/v1/configure", json={"queue": f"p{i}"}),
                                         _message_naming(limits.PARTITIONED_QUEUES)),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"/api/v1/resources/queues/p{i}")),
    refusal=(403, limits.PARTITIONED_QUEUES),
)


def _flows_code(body):
    assert body["success"] is False and body["denied"] is True, body  # as the grant's refusals answer
    return body.get("limit")


def _drop_flow(tenant_id: str, name: str) -> None:
    """Flows have no route that deletes a query: an operator's delete."""
    with db.transaction() as conn:
        conn.execute("DELETE FROM flow_queries WHERE tenant_id = %s AND name = %s", (tenant_id, name))


def _flows_granted(c: httpx.Client, t: tenants.TestTenant) -> str:
    quotas.grant(t.tenant_id)  # the flows surface's own gate: a tenant needs a grant to register
    return t.tenant_id


FLOWS = Kind(
    "flows", limits.FLOWS, setup=_flows_granted,
    create=lambda c, ctx, i: http_answer(c.post("/streams/v1/queries", json={
        "name": f"f{i}", "source_queue": "src", "config_hash": "h"}), _flows_code),
    delete=lambda c, tenant_id, i, made: _drop_flow(tenant_id, f"f{i}"),
    refusal=(403, limits.FLOWS),
)


# ---- the work surface ------------------------------------------------------------------------------


def _work_code(body):
    error = body["error"]
    if "limit" in (error.get("details") or {}):
        assert error["details"]["limit"] in error["code"].lower(), error
    return error["code"]


def _work_scope(c: httpx.Client, t: tenants.TestTenant) -> dict:
    return _ok(c.post(f"{W}/scopes", json={"slug": "base"})).json()["data"]


def _work_queue(c: httpx.Client, t: tenants.TestTenant) -> tuple[str, str]:
    scope = _work_scope(c, t)
    queue = _ok(c.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "jobs"})).json()["data"]
    return scope["id"], queue["id"]


def _delete_scope(c: httpx.Client, scope_id: str) -> None:
    _ok(c.post(f"{W}/scopes/{scope_id}/archive"))
    _ok(c.delete(f"{W}/scopes/{scope_id}"))


def _subscribe(c, ctx, i, **extra) -> Answer:
    scope_id, queue_id = ctx
    return http_answer(c.post(f"{W}/scopes/{scope_id}/subscriptions", json={
        "subscriber_type": "agent", "subscriber_id": f"a{i}", "queue_id": queue_id, **extra}),
        _work_code, lambda b: b["data"]["id"])


WORK_SCOPES = Kind(
    "work-scopes", limits.WORK_SCOPES,
    create=lambda c, ctx, i: http_answer(c.post(f"{W}/scopes", json={"slug": f"s{i}"}), _work_code,
                                         lambda b: b["data"]["id"]),
    delete=lambda c, ctx, i, made: _delete_scope(c, made),
    refusal=(403, "MAX_WORK_SCOPES"),
)

WORK_QUEUES = Kind(
    "work-queues", limits.WORK_QUEUES,
    setup=lambda c, t: _work_scope(c, t)["id"],
    create=lambda c, scope_id, i: http_answer(c.post(f"{W}/scopes/{scope_id}/queues", json={"slug": f"q{i}"}),
                                              _work_code, lambda b: b["data"]["id"]),
    delete=lambda c, scope_id, i, made: _ok(c.delete(f"{W}/scopes/{scope_id}/queues/{made}")),
    refusal=(403, "MAX_WORK_QUEUES"),
)

WORK_SUBSCRIPTIONS = Kind(
    "work-subscriptions", limits.WORK_SUBSCRIPTIONS, setup=_work_queue, create=_subscribe,
    delete=lambda c, ctx, i, made: _ok(c.delete(f"{W}/scopes/{ctx[0]}/subscriptions/{made}")),
    refusal=(403, "MAX_WORK_SUBSCRIPTIONS"),
)

WEBHOOKS = Kind(  # push subscriptions
    "webhooks", limits.WEBHOOKS, setup=_work_queue,
    create=lambda c, ctx, i: _subscribe(c, ctx, i, delivery_mode="push", push_url="https://hooks.invalid/h"),
    delete=lambda c, ctx, i, made: _ok(c.delete(f"{W}/scopes/{ctx[0]}/subscriptions/{made}")),
    refusal=(403, "MAX_WEBHOOKS"),
)

API_KEYS = Kind(  # work keys over HTTP; the tenant's own manage key is one of them
    "api-keys", limits.API_KEYS,
    setup=lambda c, t: t.tenant_id,
    create=lambda c, tenant_id, i: http_answer(c.post(f"{W}/tenants/{tenant_id}/api-keys", json={
        "subject_id": f"svc{i}", "allowed_operations": ["scaiqueue:view"]}), _work_code, lambda b: b["data"]["id"]),
    delete=lambda c, tenant_id, i, made: _ok(c.post(f"{W}/tenants/{tenant_id}/api-keys/{made}/revoke",
                                                 json={"reason": "test"})),
    refusal=(403, "MAX_API_KEYS"),
    uses=["the tenant's key"],
)


# ---- projects ------------------------------------------------------------------------------------

PROJECTS = Kind(  # no route deletes a project
    "projects", limits.PROJECTS,
    create=lambda c, ctx, i: http_answer(c.post("/v1/projects", json={"name": f"p{i}"}), _error_code,
                                         lambda b: b["project_id"]),
    delete=None,
    refusal=(403, "max_projects"),
    uses=["the tenant's default project"],
)

PROJECTS_BY_SQS_CREDENTIAL = Kind(  # a credential naming a project the tenant does not have makes it
    "projects-by-sqs-credential", limits.PROJECTS,
    create=lambda c, ctx, i: http_answer(c.post("/api/v1/sqs/credentials", json={"role": "read", "project": f"p{i}"}),
                                         _queues_code, lambda b: b["project_id"]),
    delete=None,
    refusal=(403, "max_projects"),
    uses=["the tenant's default project"],
)

KINDS = [QUEUES, SQS_QUEUES, SQS_CREDENTIALS, DURABLE_STREAMS, KEYED_STREAMS, KEYED_STREAMS_BY_PUBLISH,
         KEYED_SUBSCRIPTIONS, PARTITIONED_BY_PUSH, PARTITIONED_BY_CONFIGURE, FLOWS, WORK_SCOPES, WORK_QUEUES,
         WORK_SUBSCRIPTIONS, WEBHOOKS, API_KEYS, PROJECTS, PROJECTS_BY_SQS_CREDENTIAL]
DELETABLE = [k for k in KINDS if k.delete is not None]


@dataclass
class Limited:
    """A tenant on a plan whose `kind.limit` is `value`, its HTTP client, and the kind's context."""
    kind: Kind
    tenant: tenants.TestTenant
    client: httpx.Client
    ctx: Any
    room: int  # creations the limit leaves once the setup's and the tenant's own are counted

    def create(self, i: int) -> Answer:
        return self.kind.create(self.client, self.ctx, i)

    def assert_refused(self, answer: Answer) -> None:
        status, code = self.kind.refusal
        assert (answer.status, answer.code) == (status, code), answer.text
        assert self.kind.limit in answer.text, answer.text  # the message names the limit


@pytest.fixture
def limited(gateway):
    made: list[httpx.Client] = []

    def make(kind: Kind, value: int) -> Limited:
        tenant = new_tenant(plan=plan_with(kind.limit, value))
        c = client(gateway.url, tenant.key)
        made.append(c)
        ctx = kind.setup(c, tenant)
        return Limited(kind, tenant, c, ctx, value - len(kind.uses))

    yield make
    for c in made:
        c.close()


@pytest.mark.parametrize("kind", KINDS, ids=[k.id for k in KINDS])
def test_creations_up_to_the_limit_land_and_the_next_is_refused_naming_it(limited, kind):
    t = limited(kind, SMALL)
    for i in range(t.room):
        answer = t.create(i)
        assert answer.status in (200, 201), answer.text
    t.assert_refused(t.create(t.room))
    t.assert_refused(t.create(t.room + 1))  # and stays refused


@pytest.mark.parametrize("kind", DELETABLE, ids=[k.id for k in DELETABLE])
def test_deleting_one_frees_a_place(limited, kind):
    t = limited(kind, SMALL)
    made = [t.create(i) for i in range(t.room)]
    assert all(a.status in (200, 201) for a in made), [a.text for a in made]
    t.assert_refused(t.create(t.room))
    kind.delete(t.client, t.ctx, 0, made[0].made)
    again = t.create(t.room)
    assert again.status in (200, 201), again.text
    t.assert_refused(t.create(t.room + 1))


def _at_once(n: int, call):
    """call(i, start) on n threads, each waiting at `start` (a barrier of n) before its request; their
    answers in order (None for a thread that did not finish)."""
    start, answers = threading.Barrier(n), [None] * n

    def run(i: int) -> None:
        answers[i] = call(i, start)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    return answers


@pytest.mark.parametrize("kind", KINDS, ids=[k.id for k in KINDS])
def test_creations_racing_at_the_edge_end_with_exactly_the_limit(limited, gateway, kind):
    """RACERS threads, each with its own connection, create at once from an empty tenant: exactly
    the limit's worth land, every other one is refused naming the limit, none fails otherwise."""
    t = limited(kind, RACE_LIMIT)

    def race(i: int, start: threading.Barrier) -> Answer:
        with client(gateway.url, t.tenant.key) as own:
            ctx = t.ctx if kind is not SQS_QUEUES else _sqs_client(own, t.tenant)
            start.wait(timeout=30)
            return kind.create(own, ctx, i)

    answers = _at_once(RACERS, race)
    made = [a for a in answers if a is not None and a.status in (200, 201)]
    assert len(made) == t.room, [a.text for a in answers if a is not None]
    for a in answers:
        assert a is not None
        if a.status not in (200, 201):
            t.assert_refused(a)
    t.assert_refused(t.create(RACERS))


# ---- paths without a route of their own --------------------------------------------------------------


def test_admin_keys_count_against_the_plan(database_url):
    tenant = new_tenant(plan=plan_with(limits.API_KEYS, 2))  # its manage key is the first
    tenancy.create_key(tenant.tenant_id, "read")
    with pytest.raises(LimitExceeded) as refused:
        tenancy.create_key(tenant.tenant_id, "read")
    assert refused.value.code == "max_api_keys" and refused.value.details == {"limit": "max_api_keys", "value": 2}
    tenancy.revoke_key(str(tenancy.list_keys(tenant.tenant_id)[-1]["key_id"]))
    tenancy.create_key(tenant.tenant_id, "write")


def test_projects_made_by_the_admin_or_by_a_key_naming_one_count_against_the_plan(database_url):
    tenant = new_tenant(plan=plan_with(limits.PROJECTS, 2))  # its default project is the first
    tenancy.create_project(tenant.tenant_id, "one")
    keys_before = len(tenancy.list_keys(tenant.tenant_id))
    for make in (lambda: tenancy.create_project(tenant.tenant_id, "two"),
                 lambda: tenancy.create_key(tenant.tenant_id, "read", project="two"),
                 lambda: credentials.mint(tenant.tenant_id, "read", project="two")):
        with pytest.raises(LimitExceeded) as refused:
            make()
        assert refused.value.code == "max_projects"
        assert refused.value.details == {"limit": "max_projects", "value": 2}
    assert len(tenancy.list_keys(tenant.tenant_id)) == keys_before  # a refused key is not made either
    tenancy.create_key(tenant.tenant_id, "read", project="one")  # naming a project it has makes none
    credentials.mint(tenant.tenant_id, "read", project="one")
    assert [p["name"] for p in tenancy.list_projects(tenant.tenant_id)] == ["default", "one"]


def test_a_credential_naming_a_project_made_meanwhile_is_never_refused(gateway):
    """At the limit, a credential naming a project that exists makes none, however it came to exist."""
    tenant = new_tenant(plan=plan_with(limits.PROJECTS, 2))
    with client(gateway.url, tenant.key) as c:
        def mint(_: int, start: threading.Barrier) -> int:
            start.wait(timeout=30)
            return c.post("/api/v1/sqs/credentials", json={"role": "read", "project": "same"}).status_code

        assert _at_once(8, mint) == [201] * 8
        r = c.post("/api/v1/sqs/credentials", json={"role": "read", "project": "other"})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "max_projects", r.text
        assert [p["name"] for p in c.get("/v1/projects").json()["projects"]] == ["default", "same"]


def test_switching_a_subscription_to_push_is_one_more_webhook(gateway):
    tenant = new_tenant(plan=plan_with(limits.WEBHOOKS, 1))
    with client(gateway.url, tenant.key) as c:
        ctx = _work_queue(c, tenant)
        push = _subscribe(c, ctx, 0, delivery_mode="push", push_url="https://hooks.invalid/h")
        pull = _subscribe(c, ctx, 1)
        assert push.status == 201 and pull.status == 201
        r = c.patch(f"{W}/scopes/{ctx[0]}/subscriptions/{pull.made}",
                    json={"delivery_mode": "push", "push_url": "https://hooks.invalid/h"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "MAX_WEBHOOKS", r.text
        # a push subscription changed otherwise is not a new one
        _ok(c.patch(f"{W}/scopes/{ctx[0]}/subscriptions/{push.made}", json={"max_in_flight": 5}))
        _ok(c.patch(f"{W}/scopes/{ctx[0]}/subscriptions/{push.made}", json={"delivery_mode": "pull"}))
        _ok(c.patch(f"{W}/scopes/{ctx[0]}/subscriptions/{pull.made}",
                    json={"delivery_mode": "push", "push_url": "https://hooks.invalid/h"}))
    work_subscriptions.delete(tenant.principal, ctx[0], push.made)
    work_subscriptions.delete(tenant.principal, ctx[0], pull.made)


def test_a_push_to_a_queue_made_meanwhile_is_never_refused(gateway):
    """At the limit, a push to a queue that exists is not a creation, however it came to exist."""
    tenant = new_tenant(plan=plan_with(limits.PARTITIONED_QUEUES, 1))
    with client(gateway.url, tenant.key) as c:
        def push(_: int, start: threading.Barrier) -> int:
            start.wait(timeout=30)
            return c.post("/api/v1/push", json={"items": [{"queue": "same", "payload": 1}]}).status_code

        assert _at_once(8, push) == [201] * 8
        assert c.post("/api/v1/push", json={"items": [{"queue": "other", "payload": 1}]}).status_code == 403


def test_a_plan_set_by_the_admin_holds_from_the_next_request(gateway):
    tenant = new_tenant()
    small = plan_with(limits.QUEUES, 1)
    with client(gateway.url, tenant.key) as c:
        assert c.post("/api/v1/queues", json={"name": "a"}).status_code == 201
        assert tenancy.set_plan(tenant.tenant_id, small)["plan"] == small
        r = c.post("/api/v1/queues", json={"name": "b"})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "max_queues"
        assert c.get("/api/v1/queues/a").status_code == 200  # what it had is kept
        tenancy.set_plan(tenant.tenant_id, "pro")
        assert c.post("/api/v1/queues", json={"name": "b"}).status_code == 201


def test_every_limit_is_a_column_of_every_plan(database_url):
    """One definition: each limit the code checks is a plan column, with a figure for each plan."""
    with db.connection() as conn:
        rows = conn.execute("SELECT name, to_jsonb(p) FROM plans p WHERE name IN ('free', 'pro', 'unlimited')")
        plans = dict(rows.fetchall())
    for limit in limits.ALL:
        assert plans["free"][limit] <= plans["pro"][limit] <= plans["unlimited"][limit], limit
