"""The one opaque-cursor piece (`postbox.paging`): a position goes round trip, and anything that is not
a cursor `encode` wrote for that listing and shape is the domain's validation error naming the
parameter, never a value that reaches a query."""

from __future__ import annotations

import base64
import json

import pytest

from postbox import paging
from postbox.errors import Invalid, Unprocessable


def _raw(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _json(value) -> str:
    return _raw(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


@pytest.mark.parametrize(("shape", "position"), [
    ((int,), (0,)),
    ((int,), (paging.BIGINT,)),
    ((str,), ("orders",)),
    ((str,), ("é-ünïcode-✓",)),
    ((str,), ("x" * paging.MAX_TEXT,)),
    ((str, int), ("2026-01-01T00:00:00Z", 42)),
    ((int, int, str), (3, 7, "a/b?c=d&e")),
])
def test_a_position_goes_round_trip(shape, position):
    token = paging.encode("things", *position)
    assert len(token) <= paging.MAX_TOKEN
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")  # as it is in a URL
    assert paging.decode(token, "things", shape) == position


def test_no_cursor_is_the_first_page():
    assert paging.decode(None, "things") is None
    assert paging.decode("", "things") is None


def test_page_cuts_the_extra_row_and_names_the_last_shown():
    rows = [(1, "a"), (2, "b"), (3, "c")]
    assert paging.page(rows, 3, "things", lambda r: r[0]) == (rows, None)
    shown, nxt = paging.page(rows, 2, "things", lambda r: r[0])
    assert shown == rows[:2] and paging.decode(nxt, "things", (int,)) == (2,)
    shown, nxt = paging.page(rows, 1, "things", lambda r: (r[1], r[0]))
    assert shown == rows[:1] and paging.decode(nxt, "things", (str, int)) == ("a", 1)


BAD = {
    # not base64 at all, or not the URL-safe alphabet we write
    "not base64": "!!!!",
    "standard alphabet": base64.b64encode(b'["things",1]\xfb\xff').decode(),
    "padded": paging.encode("things", 1) + "==",
    "impossible length": "A" * 5,
    "spaces": "WyJ0aGluZ3MiLDFd ",
    "percent escapes": "%5B%22things%22%5D",
    # base64, but not UTF-8 JSON
    "binary": _raw(b"\xff\xfe\x00\x01"),
    "not json": _raw("things,1"),
    "truncated json": _raw('["things",1'),
    "NaN": _raw('["things",NaN]'),
    "huge exponent": _raw('["things",1e999]'),
    "deep nesting": _raw("[" * 150 + "]" * 150),
    # JSON of the wrong shape
    "bare number (an old cursor)": _json(1),
    "bare text": _json("orders"),
    "object": _json({"kind": "things", "position": 1}),
    "empty list": _json([]),
    "no position": _json(["things"]),
    "one too many": _json(["things", 1, 2]),
    "another listing's cursor": _json(["others", 1]),
    "kind not text": _json([1, 1]),
    "null": _json(["things", None]),
    # the wrong types or out of range
    "text for a number": _json(["things", "1"]),
    "float": _json(["things", 1.5]),
    "integral float": _json(["things", 1.0]),
    "bool": _json(["things", True]),
    "negative": _json(["things", -1]),
    "beyond bigint": _json(["things", 2**63]),
    "list for a number": _json(["things", [1]]),
    # another spelling of a cursor we would write
    "spaced json": _raw('["things", 1]'),
    "leading zero": _raw('["things",01]'),
    "escaped kind": _raw('["\\u0074hings",1]'),
    # huge
    "huge token": "A" * (paging.MAX_TOKEN + 4),
    "huge number": _raw('["things",' + "9" * 400 + "]"),
}
BAD_TEXT = {
    "number for text": _json(["things", 1]),
    "empty text": _json(["things", ""]),
    "NUL": _json(["things", "a\x00b"]),
    "lone surrogate": _raw('["things","\\ud800"]'),
    "text too long": _json(["things", "x" * (paging.MAX_TEXT + 1)]),
}


@pytest.mark.parametrize("token", BAD.values(), ids=BAD.keys())
def test_a_token_that_is_not_a_number_cursor_is_invalid(token):
    with pytest.raises(Invalid) as refused:
        paging.decode(token, "things", (int,))
    assert refused.value.status == 400
    assert refused.value.details["errors"][0]["loc"] == ["query", "cursor"]


@pytest.mark.parametrize("token", BAD_TEXT.values(), ids=BAD_TEXT.keys())
def test_a_token_that_is_not_a_text_cursor_is_invalid(token):
    with pytest.raises(Invalid):
        paging.decode(token, "things", (str,))


def test_a_wrong_token_type_is_invalid():
    for token in (1, b"WyJ0aGluZ3MiLDFd", ["things", 1]):
        with pytest.raises(Invalid):
            paging.decode(token, "things", (int,))  # type: ignore[arg-type]


def test_the_surface_names_its_parameter_and_its_error():
    with pytest.raises(Unprocessable) as refused:
        paging.decode("!!!!", "things", (int,), field="page_token", error=Unprocessable)
    assert refused.value.status == 422
    assert refused.value.details["errors"][0]["loc"] == ["query", "page_token"]


def test_a_tampered_cursor_is_refused_or_stays_in_its_listing():
    token = paging.encode("things", 5)
    flipped = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    try:
        found = paging.decode(flipped, "things", (int,))
    except Invalid:
        found = None
    assert found is None or (isinstance(found[0], int) and 0 <= found[0] <= paging.BIGINT)
    with pytest.raises(Invalid):
        paging.decode(token, "other-things", (int,))
