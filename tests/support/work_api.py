"""What every work-surface HTTP test reads an answer with: its data, or its error in the envelope."""

from __future__ import annotations

W = "/v1/modules/scaiqueue"


def ok(r, status=200):
    """The `data` of an answer with `status`."""
    assert r.status_code == status, r.text
    return r.json()["data"]


def error(r, status, code):
    """The `error` of an answer with `status` and `code`, whose request id is in body and header alike."""
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code, body
    assert body["meta"]["request_id"].startswith("req_")
    assert r.headers["x-request-id"] == body["meta"]["request_id"]
    return body["error"]


ALL_OPERATIONS = ["scaiqueue:view", "scaiqueue:publish", "scaiqueue:consume", "scaiqueue:manage"]


def _clear_key_cache():
    from functions.keys import clear_cache

    clear_cache()


def fresh_key_cache():
    """(A fixture for key tests, imported by their modules with autouse.) Every test sees keys as the
    database holds them now: each function caches resolved keys."""
    _clear_key_cache()
    yield
    _clear_key_cache()
