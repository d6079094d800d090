"""Schema-driven fuzzing (schemathesis) over the OpenAPI document against the local gateway: every
route of the route table, without a key and with a valid key (on resources that exist, so bodies
and query parameters reach the domain and its SQL rather than stopping at a 404). No answer is a
5xx, and every answer matches the document: its status code, content type and body schema.

Bounded: schemathesis's coverage phase (each field's boundaries and wrong values, where the
crashes were) plus a few random examples per operation (`EXAMPLES`)."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from functions import openapi, routes
from postbox import db, tenancy
from postbox.flows import quotas
from support.tenants import new_tenant

# xdist's workers collect schemathesis's generated tests but never run them (they pass silently):
# this module runs in make test's single-process session.
pytestmark = pytest.mark.serial

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 3
EXISTING = {"name": "fuzz", "stream": "fuzz", "subscription": "fuzz", "queue": "fuzz", "partition": "Default"}

schema = schemathesis.openapi.from_dict(openapi.document())
schema.config.phases.coverage.unexpected_methods = set()  # the route table decides methods; the gateway 404s others

_stale = [0]


@pytest.fixture(scope="module")
def fuzz_client(gateway, database_url):
    tenant = new_tenant()
    quotas.grant(tenant.tenant_id)
    with httpx.Client(base_url=gateway.url, headers={"apikey": tenant.key}, timeout=30) as c:
        c.key = tenant.key
        yield c


def _ensure_resources(c: httpx.Client) -> None:
    """The resources EXISTING names, (re)created when an example may have deleted or drained them."""
    c.post("/api/v1/queues", json={"name": "fuzz"})
    c.post("/api/v1/queues/fuzz/send", json={"message": {"n": 1}})
    c.post("/v1/streams", json={"name": "fuzz"})
    c.post("/v1/streams/fuzz/subscriptions", json={"name": "fuzz", "start": "earliest"})
    c.post("/api/v1/push", json={"items": [{"queue": "fuzz", "payload": {"n": 1}}]})


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_no_5xx_and_answers_match_the_document(case, gateway, fuzz_client):
    """Without a key on the generated values; with a key on resources that exist where the path
    names one (a generated name would mostly stop at the resource's 404)."""
    checks = CHECKS
    case.call_and_validate(base_url=gateway.url, checks=checks, timeout=30)
    if set(case.path_parameters or {}) & set(EXISTING):
        _stale[0] += 1
        if _stale[0] % 25 == 1 or case.method.upper() == "DELETE":
            _ensure_resources(fuzz_client)
        case.path_parameters = {k: EXISTING.get(k, v) for k, v in case.path_parameters.items()}
    case.call_and_validate(base_url=gateway.url, headers={"apikey": fuzz_client.key}, checks=checks, timeout=30)
    if case.method.upper() == "DELETE":
        _stale[0] = 0


DEEP_BODIES = {"array": b"[" * 10_000 + b"]" * 10_000, "object": b'{"a":' * 10_000 + b"1" + b"}" * 10_000}
BODY_ROUTES = [r for r in routes.ROUTES if r.method in ("POST", "PUT", "PATCH") and r.function not in openapi.NOT_API]


@pytest.mark.parametrize("shape", DEEP_BODIES)
def test_a_body_nested_10000_deep_is_never_a_5xx(shape, gateway, fuzz_client):
    """Every route that takes a body, on resources that exist (the durable stream `fuzz` in JSON
    mode, reached by both its mounts), answers a JSON body nested 10,000 deep with a 4xx."""
    _ensure_resources(fuzz_client)
    fuzz_client.put("/v1/stream/fuzz", headers={"content-type": "application/json"})
    with db.transaction() as conn:
        account = conn.execute("SELECT t.name FROM tenants t JOIN api_keys k ON k.tenant_id = t.id"
                               " WHERE k.key_hash = %s", (tenancy.hash_key(fuzz_client.key),)).fetchone()[0]
    existing = {**EXISTING, "account": account}
    hosted = {**existing, "stream": "s.fuzz"}  # the hosted form names its stream `s.{name}`
    answers = {}
    for route in BODY_ROUTES:
        names = hosted if route.path.startswith(routes.DURABLE_HOSTED) else existing
        path = re.sub(r"\{([^}+]+)\+?\}", lambda m, names=names: names.get(m.group(1), "fuzz"), route.path)
        r = fuzz_client.request(route.method, path, content=DEEP_BODIES[shape],
                                headers={"content-type": "application/json"})
        answers[f"{route.method} {path}"] = r.status_code
    assert not {k: v for k, v in answers.items() if v >= 500}, answers
    assert answers["POST /v1/stream/fuzz"] == 400 and answers[f"POST /{account}/s.fuzz"] == 400


# Rule expressions and HITL sections are parsed past the scope's 404, so they are fuzzed on a scope
# that exists: random token soups and random texts as conditions (then publishes the rules judge),
# random section lists as pattern specs. Every answer is a 201 or a 422, never a 5xx.
_TOKENS = ["labels.tier", "body.a.b", "type", "queue", "priority.score", "labels['x y']", "==", "!=", "<", "<=",
           ">", ">=", "=", "===", "&&", "||", "!", "~", "in", "not", "and", "or", "contains", "exists", "exists(",
           "(", ")", "[", "]", ",", ".", "'a'", '"b"', "'", '"', "1", "-2.5", "1e999", "true", "null", "\\", "é",
           "\x00", "\u2028", "labels.", "[1,", "matches"]
_EXPRESSIONS = st.one_of(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=40).map(" ".join),
                         st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=40).map("".join),
                         st.text(min_size=1, max_size=300))
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))
_SECTION = st.dictionaries(st.sampled_from(["type", "title", "content", "field", "options", "kind", "required",
                                            "label", "other"]),
                           st.one_of(st.sampled_from(["context", "decision", "input", "summary", "text", "{{p}}"]),
                                     _SCALARS, st.lists(_SCALARS, max_size=3)), max_size=5)


@pytest.fixture(scope="module")
def work_scope(fuzz_client):
    w = "/v1/modules/scaiqueue"
    scope = fuzz_client.post(f"{w}/scopes", json={"slug": "fuzz-parsed"}).json()["data"]["id"]
    queue = fuzz_client.post(f"{w}/scopes/{scope}/queues", json={"slug": "in"}).json()["data"]["id"]
    return f"{w}/scopes/{scope}", queue


@given(text=_EXPRESSIONS)
@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_rule_expressions_are_201_or_422(text, fuzz_client, work_scope):
    base, queue = work_scope
    r = fuzz_client.post(f"{base}/routing-rules", json={"name": "f", "conditions": text, "action": {"type": "archive"},
                                                         "enabled": False})
    assert r.status_code in (201, 422), (text, r.text)
    if r.status_code == 201:  # the evaluator judges what the parser let through
        rule = r.json()["data"]
        assert rule["conditions"] == text
        dry = fuzz_client.post(f"{base}/routing-rules/test", json={"message": {"labels": {"tier": "1"},
                                                                               "body": {"a": {"b": [1]}}}})
        assert dry.status_code == 200, dry.text
        assert fuzz_client.delete(f"{base}/routing-rules/{rule['id']}").status_code == 200
    else:
        assert r.json()["error"]["details"][0]["field"].startswith("conditions"), r.text


@given(sections=st.one_of(st.lists(_SECTION, max_size=4), _SCALARS))
@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_hitl_sections_are_201_or_422(sections, fuzz_client, work_scope):
    base, _ = work_scope
    r = fuzz_client.post(f"{base}/hitl-patterns", json={"name": f"f{uuid.uuid4().hex[:8]}", "version": "1",
                                                        "spec": {"sections": sections},
                                                        "parameters": [{"name": "p", "required": False}]})
    assert r.status_code in (201, 422), (sections, r.text)
    if r.status_code == 422:
        assert r.json()["error"]["details"][0]["field"].startswith("spec"), r.text
