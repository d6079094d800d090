"""A work cursor (`postbox.paging`) belongs to the listing that wrote it: a cursor of one listing,
well-formed and of the right type, is refused by another with 422 naming `cursor`."""

from __future__ import annotations

from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


def test_a_cursor_belongs_to_the_listing_that_wrote_it(api):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "listed"}), 201)
    for n in range(2):
        _ok(api.post(f"{W}/scopes", json={"slug": f"other-{n}"}), 201)
        _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": f"q-{n}"}), 201)
    scopes_cursor = api.get(f"{W}/scopes", params={"limit": 1}).json()["meta"]["next_cursor"]
    queues = f"{W}/scopes/{scope['id']}/queues"
    first = api.get(queues, params={"limit": 1}).json()
    queues_cursor = first["meta"]["next_cursor"]
    assert scopes_cursor and queues_cursor
    for path, foreign in ((queues, scopes_cursor), (f"{W}/scopes", queues_cursor)):  # slugs both, not each other's
        err = _error(api.get(path, params={"cursor": foreign}), 422, "VALIDATION_ERROR")
        assert err["details"][0]["field"] == "cursor"
    second = _ok(api.get(queues, params={"limit": 1, "cursor": queues_cursor}))  # its own listing pages on
    assert len(second) == 1 and second[0]["slug"] > first["data"][0]["slug"]
