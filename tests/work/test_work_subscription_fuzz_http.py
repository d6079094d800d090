"""Fuzzing the subscriber's forms past the scope's 404 (the schema-driven fuzzer stops at it): random
subscription filters, random `subscription_id`s and bodies on the queue's claim and the scope's
complete/fail/release, and random `state`/`cursor`/`limit` on a queue's listing, on a scope, queues
and subscriptions that exist. Never a 5xx: a 2xx, or a 4xx in the envelope naming what it refused."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.tenants import new_tenant
from support.work_api import W

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=40))
_IDS = st.one_of(_SCALARS, st.uuids().map(str), st.just("not-a-uuid"), st.text(min_size=36, max_size=36),
                 st.lists(st.text(max_size=5), max_size=2))
_FIELDS = st.one_of(st.sampled_from(["type", "labels.colour", "body.a.b", "priority.tier", "priority.score", "queue",
                                     "content_type", "correlation_id", "colour", "labels", "labels.", "body..x",
                                     "priority.colour", "é", "\x00", ""]), st.text(max_size=30))
_OPS = st.one_of(st.sampled_from(["eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "contains", "exists",
                                  "not_exists", "==", "like"]), _SCALARS)
_LEAF = st.fixed_dictionaries({"field": _FIELDS, "op": _OPS}, optional={"value": st.one_of(_SCALARS,
                                                                                           st.lists(_SCALARS))})
_FILTERS = st.one_of(_SCALARS, _LEAF, st.recursive(_LEAF, lambda kids: st.one_of(
    st.fixed_dictionaries({"all": st.lists(kids, max_size=3)}),
    st.fixed_dictionaries({"any": st.lists(kids, max_size=3)}),
    st.fixed_dictionaries({"not": kids})), max_leaves=6), st.dictionaries(st.text(max_size=6), _SCALARS, max_size=3))
FUZZ = settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def setup(gateway, database_url):
    tenant = new_tenant()
    with httpx.Client(base_url=gateway.url, headers={"apikey": tenant.key}, timeout=30) as c:
        scope = c.post(f"{W}/scopes", json={"slug": "fuzz-subs"}).json()["data"]["id"]
        base = f"{W}/scopes/{scope}"
        jobs = c.post(f"{base}/queues", json={"slug": "jobs"}).json()["data"]["id"]
        feed = c.post(f"{base}/queues", json={"slug": "feed", "consumer_mode": "broadcast"}).json()["data"]["id"]
        subs = [c.post(f"{base}/subscriptions", json={"subscriber_type": "agent", "subscriber_id": "f",
                                                      "queue_id": q}).json()["data"]["id"] for q in (jobs, feed)]
        yield c, base, (jobs, feed), subs


def _refused_or_ok(r: httpx.Response, *fields: str) -> None:
    assert r.status_code < 500, r.text
    if r.status_code == 422:
        named = r.json()["error"]["details"][0]["field"]
        assert not fields or named.split(".")[0].split("[")[0] in fields, r.text


@given(flt=_FILTERS, which=st.sampled_from([0, 1]))
@FUZZ
def test_subscription_filters_are_201_or_422_naming_the_filter(flt, which, setup):
    c, base, queues, _ = setup
    r = c.post(f"{base}/subscriptions", json={"subscriber_type": "agent", "subscriber_id": f"z{uuid.uuid4().hex[:6]}",
                                              "queue_id": queues[which], "filter": flt})
    assert r.status_code in (201, 422), r.text
    _refused_or_ok(r, "filter")
    if r.status_code == 201:  # the filter the model let through is one the claim walk can judge
        sub = r.json()["data"]["id"]
        c.post(f"{base}/queues/{queues[which]}/messages", json={"body": {"a": {"b": 1}}, "labels": {"colour": "x"}})
        _refused_or_ok(c.post(f"{base}/subscriptions/{sub}/claim", json={"batch_size": 5}))
        assert c.delete(f"{base}/subscriptions/{sub}").status_code == 200


@given(sub=_IDS, body=st.dictionaries(st.sampled_from(["batch_size", "visibility_timeout_s", "attributes", "x"]),
                                      _SCALARS, max_size=2),
       which=st.sampled_from([0, 1]), named=st.booleans())
@FUZZ
def test_claims_naming_a_subscription_are_never_a_5xx(sub, body, which, named, setup):
    c, base, queues, subs = setup
    given_sub = subs[which] if named else sub
    r = c.post(f"{base}/queues/{queues[which]}/messages/claim", json={**body, "subscription_id": given_sub})
    _refused_or_ok(r)
    if r.status_code == 200:
        for m in r.json()["data"]:
            c.post(f"{base}/messages/{m['id']}/release", json={"subscription_id": given_sub})


@given(sub=_IDS, action=st.sampled_from(["complete", "fail", "release"]), message=st.one_of(st.uuids().map(str),
                                                                                          st.text(max_size=40)),
       extra=st.dictionaries(st.sampled_from(["claim_token", "response", "reason", "y"]), _SCALARS, max_size=2))
@FUZZ
def test_finishes_naming_a_subscription_are_never_a_5xx(sub, action, message, extra, setup):
    c, base, _, _ = setup
    r = c.post(f"{base}/messages/{quote(message, safe='') or 'x'}/{action}",
               json={**extra, "subscription_id": sub})
    _refused_or_ok(r)
    assert r.status_code != 200  # no message is claimed there


@given(params=st.dictionaries(st.sampled_from(["state", "cursor", "limit", "other"]),
                              st.one_of(st.sampled_from(["pending", "delivering", "archived", "", "PENDING"]),
                                        st.text(max_size=60), st.integers().map(str)), max_size=3))
@FUZZ
def test_listings_with_or_without_a_state_are_never_a_5xx(params, setup):
    c, base, queues, _ = setup
    r = c.get(f"{base}/queues/{queues[0]}/messages", params=params)
    _refused_or_ok(r, "state", "cursor", "limit", "other")
