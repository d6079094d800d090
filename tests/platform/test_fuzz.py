"""Schema-driven fuzzing (schemathesis) over the OpenAPI document against the local gateway: every
route of the route table, without a key and with a valid key (on resources that exist, so bodies
and query parameters reach the domain and its SQL rather than stopping at a 404). No answer is a
5xx, and every answer matches the document: its status code, content type and body schema.

Bounded: schemathesis's coverage phase (each field's boundaries and wrong values, where the
crashes were) plus a few random examples per operation (`EXAMPLES`)."""

from __future__ import annotations

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

from functions import openapi
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
