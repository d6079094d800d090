"""Handlers called directly with synthetic API Gateway events, as Lambda would call them."""

from __future__ import annotations

import json

from functions.api.queues.app import handler
from functions.authorizer import authorize, clear_cache, key_from_headers
from functions.authorizer import handler as authorizer_handler
from functions.local.events import authorizer_event
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


def test_authorizer_answers_with_the_principal_or_a_reason(tenant):
    clear_cache()
    ok = authorizer_handler(authorizer_event(api_event("GET", "/api/v1/queues", key=tenant.key)),
                            LocalContext("authorizer"))
    assert ok["isAuthorized"] is True and ok["context"]["authenticated"] is True
    assert ok["context"]["tenant_id"] == tenant.tenant_id and ok["context"]["role"] == "manage"
    missing = authorize({})
    assert missing["context"] == {"authenticated": False, "reason": "No valid session or key."}
    assert authorize({"apikey": "pbx_wrong"})["context"]["authenticated"] is False


def test_the_principal_names_its_actor(tenant):
    """A tenant key is its own subject: ("api_key", its id), as work publishes record their source."""
    from functions.api.common import principal_from

    clear_cache()
    context = authorize({"apikey": tenant.key})["context"]
    principal = principal_from(context)
    assert principal.actor == ("api_key", principal.key_id) and principal.key_id == context["key_id"]
    named = principal_from({**context, "subject_type": "agent", "subject_id": "billing-bot"})
    assert named.actor == ("agent", "billing-bot")


def test_authorizer_cache_forgets_revoked_keys_after_clearing(tenant):
    clear_cache()
    issued = tenancy.create_key(tenant.tenant_id, "read")
    assert authorize({"apikey": issued.key})["context"]["authenticated"] is True
    tenancy.revoke_key(issued.key_id)
    clear_cache()
    assert authorize({"apikey": issued.key})["context"]["authenticated"] is False


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
