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
