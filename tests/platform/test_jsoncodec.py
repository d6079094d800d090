"""postbox.jsoncodec: orjson's speed, json.loads' answers."""

from __future__ import annotations

import json

import pytest

from postbox import jsoncodec

DOCUMENTS = [
    b'{"to":"a@example.com","n":12345}',
    b"[1,-2,3.5,1e10,0.1,true,false,null]",
    b"18446744073709551615",  # fits 64 bits unsigned: orjson keeps it exact
    b"123456789012345678901234567890",  # beyond 64 bits: orjson would give a float
    b"-9223372036854775809",
    b'{"a":[{"b":99999999999999999999999}]}',
    b'"1234567890123456789012345 inside a string"',
    b'"caf\\u00e9 \\ud83d\\ude00"',
    "\"\u00e9t\u00e9\"".encode(),
    b"1e400",  # orjson refuses it; json.loads says inf
    b"0.30000000000000004",
]


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_loads_answers_as_json_loads_does(doc):
    expected = json.loads(doc)
    for given in (doc, memoryview(doc), bytearray(doc), doc.decode()):
        got = jsoncodec.loads(given)
        assert got == expected and type(got) is type(expected)


def test_invalid_documents_fail_as_json_loads_does():
    for doc in (b"{", b"[1,]", b"NaN-ish", b""):
        with pytest.raises(ValueError):
            jsoncodec.loads(doc)


def _deep(n: int) -> list:
    """Nested deeper than orjson writes (it stops at 255 levels)."""
    value: list = []
    for _ in range(n):
        value = [value]
    return value


VALUES = [
    {"to": "a@example.com", "n": 1}, [1, 2.5, None, True, "é☃"], {"big": 2**70}, {1: "a", None: 2},
    float("nan"), {"a": [float("inf"), None]}, "\x00\x1f\"\\\x7f\u2028", 0.1, 1e16, -0.0,
    {"d": {"e": [[]]}}, 2**64 - 1, -(2**63), _deep(300),
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_writes_what_the_standard_encoder_writes(value):
    standard = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert jsoncodec.dumps(value) == standard


def test_dumps_differs_only_in_spelling_a_small_exponent():
    assert json.loads(jsoncodec.dumps(1e-07)) == 1e-07


def test_strict_dumps_refuses_what_json_cannot_write():
    for value in (float("nan"), {"a": [None, float("-inf")]}):
        with pytest.raises(ValueError):
            jsoncodec.dumps(value, strict=True)
    assert jsoncodec.dumps({"a": None}, strict=True) == b'{"a":null}'


def test_dumps_fails_on_what_cannot_be_encoded_as_the_standard_encoder_does():
    with pytest.raises(UnicodeEncodeError):
        jsoncodec.dumps("\ud800")
    circular: list = []
    circular.append(circular)
    with pytest.raises(ValueError):
        jsoncodec.dumps(circular)
