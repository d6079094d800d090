"""Handlers called directly with synthetic API Gateway events, as Lambda would call them."""

from __future__ import annotations

import json

from functions.api.queues.app import handler
from functions.keys import clear_cache, key_from_headers, resolve
from functions.local.lambda_context import LocalContext
from postbox import tenancy
from support.events import api_event

CTX = LocalContext("queues")


def _call(event):
    result = handler(event, CTX)
    return result["statusCode"], json.loads(result["body"])


def test_create_send_read_archive_through_the_handler(tenant):
    status, q = _call(api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "h"}))
    assert status == 201 and q["name"] == "h"
    status, sent = _call(api_event("POST", "/api/v1/queues/h/send", key=tenant.key, body={"message": [1, 2]}))
    assert status == 201
    status, read = _call(api_event("POST", "/api/v1/queues/h/read", key=tenant.key, body={"qty": 5}))
    assert status == 200 and read["messages"][0]["message"] == [1, 2]
    status, archived = _call(api_event("POST", "/api/v1/queues/h/archive", key=tenant.key,
                                       body={"msg_ids": [sent["msg_id"]]}))
    assert (status, archived) == (200, {"archived": [sent["msg_id"]]})


def test_no_key_is_401_in_the_queues_envelope(database_url):
    status, body = _call(api_event("GET", "/api/v1/queues"))
    assert status == 401 and body == {"detail": "No valid session or key."}


def test_malformed_json_is_422_naming_the_body(tenant):
    status, body = _call(api_event("POST", "/api/v1/queues", key=tenant.key, raw_body="{nope"))
    assert status == 422 and body["detail"][0]["loc"][0] == "body"


def test_wrong_type_is_422_naming_the_field(tenant):
    _call(api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "h"}))
    status, body = _call(api_event("POST", "/api/v1/queues/h/read", key=tenant.key, body={"qty": "ten"}))
    assert status == 422 and body["detail"][0]["loc"] == ["body", "qty"]


def test_browse_query_parameters_are_validated(tenant):
    _call(api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "h"}))
    status, body = _call(api_event("GET", "/api/v1/queues/h/messages", key=tenant.key, query="limit=0"))
    assert status == 422 and body["detail"][0]["loc"] == ["query", "limit"]


def test_the_key_resolver_answers_with_the_principal_or_a_reason(tenant):
    clear_cache()
    ok = resolve({"apikey": tenant.key}, "/api/v1/queues", "127.0.0.1")
    assert ok["authenticated"] is True
    assert ok["tenant_id"] == tenant.tenant_id and ok["role"] == "manage"
    assert resolve({}) == {"authenticated": False, "reason": "No valid session or key."}
    assert resolve({"apikey": "pbx_wrong"}) == {"authenticated": False, "reason": "Invalid or expired key."}


def test_the_handler_resolves_the_key_itself_whatever_the_event_claims(tenant, make_tenant):
    """No authorizer runs before the function: it resolves the key in the request's headers and
    overwrites whatever the event says at requestContext.authorizer (nothing can be forged there)."""
    _call(api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "mine"}))
    forged = api_event("GET", "/api/v1/queues/mine")
    forged["requestContext"]["authorizer"] = {"lambda": resolve({"apikey": tenant.key})}
    status, body = _call(forged)
    assert status == 401 and body == {"detail": "No valid session or key."}
    other = make_tenant()
    stranger = api_event("GET", "/api/v1/queues/mine", key=other.key)
    stranger["requestContext"]["authorizer"] = {"lambda": resolve({"apikey": tenant.key})}
    assert _call(stranger)[0] == 404  # another tenant's queue does not exist for it
    assert _call(api_event("GET", "/api/v1/queues/mine", key=tenant.key))[0] == 200


def test_garbage_keys_are_401_never_500(database_url):
    for key in ("pbx_" + "x" * 500, "pbx_\u00e9\u4e2d", "pbx_\x00nul", "pbx_\ud800", "Bearer", "pbx_"):
        for headers in ({"apikey": key}, {"Authorization": f"Bearer {key}"}):
            status, body = _call(api_event("GET", "/api/v1/queues", headers=headers))
            assert status == 401 and body == {"detail": "Invalid or expired key."}, (key, status, body)


def test_the_principal_names_its_actor(tenant):
    """A tenant key is its own subject: ("api_key", its id), as work publishes record their source."""
    from functions.api.common import principal_from

    clear_cache()
    context = resolve({"apikey": tenant.key})
    principal = principal_from(context)
    assert principal.actor == ("api_key", principal.key_id) and principal.key_id == context["key_id"]
    named = principal_from({**context, "subject_type": "agent", "subject_id": "billing-bot"})
    assert named.actor == ("agent", "billing-bot")


def test_the_key_cache_forgets_revoked_keys_after_clearing(tenant):
    clear_cache()
    issued = tenancy.create_key(tenant.tenant_id, "read")
    assert resolve({"apikey": issued.key})["authenticated"] is True
    tenancy.revoke_key(issued.key_id)
    clear_cache()
    assert resolve({"apikey": issued.key})["authenticated"] is False


def test_a_revoked_key_is_refused_by_the_handler_within_the_cache_bound(tenant, monkeypatch):
    """The per-container cache holds a key's answer POSTBOX_KEY_CACHE_SECONDS: a revoked key still
    served from it until then, and refused with the surface's 401 after."""
    from postbox import config

    monkeypatch.setenv("POSTBOX_KEY_CACHE_SECONDS", "1")
    config.reset()
    clear_cache()
    issued = tenancy.create_key(tenant.tenant_id, "read")
    assert _call(api_event("GET", "/api/v1/queues", key=issued.key))[0] == 200
    tenancy.revoke_key(issued.key_id)
    assert _call(api_event("GET", "/api/v1/queues", key=issued.key))[0] == 200  # cached, within the bound
    import time

    time.sleep(1.1)
    status, body = _call(api_event("GET", "/api/v1/queues", key=issued.key))
    assert status == 401 and body == {"detail": "Invalid or expired key."}


def test_key_sources():
    assert key_from_headers({"Authorization": "Bearer pbx_a", "apikey": "pbx_b"}) == "pbx_a"
    assert key_from_headers({"Authorization": "Bearer user-session", "apikey": "pbx_b"}) == "pbx_b"
    assert key_from_headers({"apikey": " pbx_c "}) == "pbx_c"
    assert key_from_headers({"authorization": "Basic xyz"}) is None
    assert key_from_headers(None) is None


def test_a_trailing_slash_is_served_as_the_path_without_it(tenant):
    """API Gateway routes `/api/v1/queues/` to the `/api/v1/queues` route and hands the function the
    path as it was asked: the resolver answers it as the path without the slash."""
    _call(api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "slashed"}))
    plain = _call(api_event("GET", "/api/v1/queues", key=tenant.key))
    slashed = _call(api_event("GET", "/api/v1/queues/", key=tenant.key))
    assert plain[0] == 200 and slashed == plain
    assert _call(api_event("GET", "/api/v1/queues/slashed/", key=tenant.key))[1]["name"] == "slashed"
