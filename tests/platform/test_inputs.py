"""The one input layer (`postbox.inputs`) and the name rules (`postbox.names`), without a database."""

from __future__ import annotations

import pytest

from postbox import inputs, names
from postbox.errors import Invalid, TooLarge, UnsupportedMediaType
from postbox.inputs import BadInput, parse_json


def test_depth_is_measured_without_recursion():
    import json

    def deeper(value, limit):
        return inputs.nests_deeper_than(json.dumps(value).encode(), limit)

    assert not deeper([[1], {"a": [2]}], 3) and deeper([[1], {"a": [2]}], 2)
    assert not deeper(["[[[[", "x" * 1000], 1)  # brackets in strings are text
    assert not deeper(['a \\" [[[[ \\', {'k"[[': ']]]]'}], 2) and deeper(['"[', {"k": ["]"]}], 2)
    assert not deeper([[{}] for _ in range(10_000)], 3) and deeper([[{}] for _ in range(10_000)], 2)
    assert not deeper([{"a": [{"b": []}]}], 5) and deeper([{"a": [{"b": []}]}], 4)  # alternating kinds
    assert not deeper([], 1) and not deeper({}, 1) and not deeper(5, 0) and deeper([], 0)
    with pytest.raises(BadInput, match="127"):
        parse_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInput, match="127"):
        parse_json("[" * 1000 + "1" * 30 + "]" * 1000)  # the standard parser's path (a long integer)
    assert parse_json("[" * 127 + "]" * 127) is not None
    with pytest.raises(BadInput) as e:
        parse_json("[" * 128 + "]" * 128)
    assert e.value.loc == ("body",) and "127" in e.value.message


@pytest.mark.parametrize(("text", "loc"), [
    ('{"a": "x\\u0000"}', ("body", "a")),
    ('{"a": [1, {"b\\u0000": 2}]}', ("body", "a", 1, "b\x00")),
    ('{"a": "\\ud800"}', ("body", "a")),
    ('{"a": NaN}', ("body", "a")),
    ('{"a": [-Infinity]}', ("body", "a", 0)),
    ('{"a": 1e400}', ("body", "a")),
])
def test_values_postgresql_refuses_are_named(text, loc):
    with pytest.raises(BadInput) as e:
        parse_json(text)
    assert e.value.loc == loc


def test_what_postgresql_stores_passes_untouched():
    text = '{"a": "\\\\u0000 is text", "b": "\\ud83d\\udce6", "n": 123456789012345678901234567890, "e": 1e300}'
    assert parse_json(text) == {"a": "\\u0000 is text", "b": "\U0001f4e6", "n": 123456789012345678901234567890,
                                "e": 1e300}
    assert parse_json(b"") is None and parse_json(None) is None


def test_encoding_syntax_and_size():
    with pytest.raises(BadInput, match="UTF-8"):
        parse_json('{"a": "caf\u00e9"}'.encode("latin-1"))
    with pytest.raises(BadInput, match="not valid JSON"):
        parse_json("{nope")
    with pytest.raises(TooLarge):
        parse_json(b"[1]", max_bytes=2)
    assert isinstance(BadInput(("body",), "x"), Invalid)


def test_the_content_type_rule():
    for ok in (None, "", "application/json", "Application/JSON; charset=utf-8"):
        assert inputs.is_json_type(ok)
        inputs.require_json_type(ok)
    for bad in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        with pytest.raises(UnsupportedMediaType):
            inputs.require_json_type(bad)


def test_parameters_are_storable_text():
    inputs.check_params({"name": "caf\u00e9 \U0001f4e6"}, "path")
    with pytest.raises(BadInput) as e:
        inputs.check_params({"ok": "1", "name": "a\x00"}, "query")
    assert e.value.loc == ("query", "name")


@pytest.mark.parametrize(("rule", "good", "bad"), [
    (names.QUEUE, ["a", "a-b_1", "a" * 48], ["", "A", "1a", "a" * 49, "a b", "caf\u00e9"]),
    (names.KEYED_STREAM, ["v1.orders_x-y", "a" * 128], ["", "a b", "a/b", "'; drop table x;--", "a" * 129]),
    (names.PARTITIONED_QUEUE, ["q", "ns:q@x", "a" * 128], ["", ".q", "q q", "a" * 129]),
    (names.PARTITION, ["Default", "caf\u00e9 1", "p" * 256], ["", "a/b", "a\x00", "p" * 257]),
    (names.FLOW_QUERY, ["my query", "q" * 256], ["", "q\n", "q" * 257]),
])
def test_one_name_rule_per_kind(rule, good, bad):
    for name in good:
        assert rule.check(name) == name
    for name in bad:
        with pytest.raises(Invalid) as e:
            rule.check(name, "source_queue")
        assert e.value.message.startswith("source_queue: ")
