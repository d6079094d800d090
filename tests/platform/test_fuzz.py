"""Schema-driven fuzzing (schemathesis) over the OpenAPI document against the local gateway: every
route of the route table, without a key and with a valid key (on resources that exist, so bodies
and query parameters reach the domain and its SQL rather than stopping at a 404). No answer is a
5xx, and every answer matches the document: its status code, content type and body schema.

Bounded: schemathesis's coverage phase (each field's boundaries and wrong values, where the
crashes were) plus a few random examples per operation (`EXAMPLES`)."""

from __future__ import annotations

import re

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
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
