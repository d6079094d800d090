"""Rule conditions as expressions in the product's notation: the parser's translation into the
JSON form, its refusals with the position, and over HTTP a rule written as an expression (or a
list) read back as written, judged by the dry run and routing a publish, and bad input answered
422 naming the field, never 500."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.work.expressions import ExpressionError, depth, parse
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok

TIER = {"field": "labels.customer_tier", "op": "eq", "value": "premium"}


@pytest.mark.parametrize(("text", "parsed"), [
    ("labels.customer_tier == 'premium'", TIER),
    ('labels.customer_tier == "premium"', TIER),
    ("labels['customer_tier'] == 'premium'", TIER),
    ("priority.score >= 700", {"field": "priority.score", "op": "gte", "value": 700}),
    ("body.total < -2.5e1", {"field": "body.total", "op": "lt", "value": -25.0}),
    ("type != 'ping' AND queue <= 'm'", {"all": [{"field": "type", "op": "ne", "value": "ping"},
                                                 {"field": "queue", "op": "lte", "value": "m"}]}),
    ("priority.tier in ['critical', 'high',]", {"field": "priority.tier", "op": "in", "value": ["critical", "high"]}),
    ("labels.region not in ['eu']", {"field": "labels.region", "op": "not_in", "value": ["eu"]}),
    ("body.tags contains 'vip'", {"field": "body.tags", "op": "contains", "value": "vip"}),
    ("body.tags not contains 1", {"not": {"field": "body.tags", "op": "contains", "value": 1}}),
    ("body.order.id exists", {"field": "body.order.id", "op": "exists"}),
    ("exists(body.order)", {"field": "body.order", "op": "exists"}),
    ("labels.x not exists", {"field": "labels.x", "op": "not_exists"}),
    ("labels.x == null", {"field": "labels.x", "op": "not_exists"}),
    ("labels.x != null", {"field": "labels.x", "op": "exists"}),
    ("body.flag == true or body.flag == false",
     {"any": [{"field": "body.flag", "op": "eq", "value": True}, {"field": "body.flag", "op": "eq", "value": False}]}),
    ("labels.and == 'or'", {"field": "labels.and", "op": "eq", "value": "or"}),
    ("(labels.a == '1' or labels.b == '2') and not (labels.c == '3' and labels.d == '4' and labels.e == '5')",
     {"all": [{"any": [{"field": "labels.a", "op": "eq", "value": "1"},
                       {"field": "labels.b", "op": "eq", "value": "2"}]},
              {"not": {"all": [{"field": f"labels.{k}", "op": "eq", "value": v} for k, v in
                               (("c", "3"), ("d", "4"), ("e", "5"))]}}]}),
    ("labels.a == 'it\\'s' and labels.b == '\\u00e9'", {"all": [{"field": "labels.a", "op": "eq", "value": "it's"},
                                                              {"field": "labels.b", "op": "eq", "value": "é"}]}),
])
def test_expressions_translate_into_the_json_form(text, parsed):
    assert parse(text) == parsed


@pytest.mark.parametrize(("text", "position", "says"), [
    ("labels.x = 'a'", 10, "unknown operator `=`"),
    ("labels.x ~= 'a'", 10, "unknown operator `~=`"),
    ("labels.x like 'a%'", 10, "unknown operator `like`"),
    ("labels.x == 1 && labels.y == 2", 15, "unknown operator `&&`"),
    ("nonsense == 1", 1, "unknown field `nonsense`"),
    ("labels.x ==", 12, "expected a value"),
    ("(labels.x == 1", 15, "expected `)`"),
    ("labels.x == 'open", 13, "unterminated string"),
    ("labels.x == 1 labels.y == 2", 15, "expected `and`, `or`"),
    ("labels.x > true", 10, "compares with a number or a string"),
    ("labels.x == [1]", 13, "a list follows only `in`"),
    ("labels.x in 'a'", 13, "expected `[`"),
    ("labels.x contains null", 19, "`contains` takes"),
    ("labels.x ∈ [1]", 10, "unexpected character"),
    ("ᜀ", 1, "unexpected character"),
    ("labels.é == 1", 8, "unexpected character"),
    ("labels.x == ٣", 13, "unexpected character"),
    ("labels.x == -٣", 14, "unexpected character"),
    ("", 1, "empty"),
    ("not " * 40 + "labels.x exists", 129, "nests deeper"),
    ("labels.x == 12abc", 13, "not a number"),
    ("labels['a.b'] == 1", 8, "holds no `.`"),
])
def test_what_does_not_parse_names_the_position(text, position, says):
    with pytest.raises(ExpressionError) as e:
        parse(text)
    assert e.value.position == position and says in e.value.reason, str(e.value)


def test_expressions_nest_no_deeper_than_the_json_form():
    deep = "labels.x == 1"
    for _ in range(4):
        deep = f"not (labels.y == 1 or {deep})"  # each round adds not + any: two levels
    with pytest.raises(ExpressionError, match="nest at most 8"):
        parse(deep)


@pytest.fixture
def queues(api, scope):
    made = {slug: _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": slug}), 201)
            for slug in ("inbox", "premium", "bulk")}
    return {k: v["id"] for k, v in made.items()}


def test_an_expression_rule_routes_a_publish_and_reads_back_as_written(api, scope, queues):
    base = f"{W}/scopes/{scope['id']}/routing-rules"
    text = "labels.customer_tier == 'premium' and (priority.score >= 700 or body.tags contains 'vip')"
    rule = _ok(api.post(base, json={"name": "vip", "priority": 1, "conditions": text,
                                    "action": {"type": "route", "queue_id": queues["premium"]}}), 201)
    assert rule["conditions"] == text
    assert rule["conditions_parsed"] == {"all": [TIER, {"any": [
        {"field": "priority.score", "op": "gte", "value": 700},
        {"field": "body.tags", "op": "contains", "value": "vip"}]}]}
    assert _ok(api.get(f"{base}/{rule['id']}"))["conditions"] == text
    listed = ["body.kind == 'bulk'", {"field": "labels.size", "op": "gt", "value": 10}]
    other = _ok(api.post(base, json={"name": "bulk", "priority": 2, "conditions": listed,
                                     "action": {"type": "route", "queue_id": queues["bulk"]}}), 201)
    assert other["conditions"] == listed
    assert other["conditions_parsed"] == {"all": [{"field": "body.kind", "op": "eq", "value": "bulk"}, listed[1]]}

    publish = f"{W}/scopes/{scope['id']}/queues/{queues['inbox']}/messages"
    cases = [
        ({"labels": {"customer_tier": "premium"}, "body": {"tags": ["vip"]}}, "premium"),
        ({"labels": {"customer_tier": "premium"}, "priority": {"tier": "high", "score": 900}, "body": {}}, "premium"),
        ({"labels": {"customer_tier": "premium"}, "body": {"tags": ["new"]}}, "inbox"),
        ({"labels": {"customer_tier": "basic", "size": "11"}, "body": {"kind": "bulk"}}, "bulk"),
        ({"labels": {"size": "9"}, "body": {"kind": "bulk"}}, "inbox"),
    ]
    for fields, landed in cases:
        dry = _ok(api.post(f"{base}/test", json={"message": {**fields, "queue_id": queues["inbox"]}}))
        expected = {"premium": "vip", "bulk": "bulk", "inbox": None}[landed]
        assert (dry["applied"] or {}).get("name") == expected, fields
        m = _ok(api.post(publish, json=fields), 201)
        assert m["queue_id"] == queues[landed], fields

    changed = _ok(api.patch(f"{base}/{rule['id']}", json={"conditions": "labels.customer_tier in ['gold']"}))
    assert changed["conditions"] == "labels.customer_tier in ['gold']"
    assert changed["conditions_parsed"] == {"field": "labels.customer_tier", "op": "in", "value": ["gold"]}
    as_json = _ok(api.patch(f"{base}/{rule['id']}", json={"conditions": TIER}))
    assert as_json["conditions"] == TIER == as_json["conditions_parsed"]
    cleared = _ok(api.patch(f"{base}/{rule['id']}", json={"conditions": None}))
    assert cleared["conditions"] is None


@pytest.mark.parametrize(("conditions", "field", "says"), [
    ("labels.tier === 'a'", "conditions", "unknown operator `===`"),
    ("labels.tier matches 'a.*'", "conditions", "unknown operator `matches`"),
    ("labels.tier == ", "conditions", "position 16"),
    ("colour == 'red'", "conditions", "unknown field `colour`"),
    (["labels.a == '1'", "labels.b =! '2'"], "conditions.1", "unknown operator `=!`"),
    ([{"field": "labels.a", "op": "like", "value": "x"}], "conditions.0.op", "Input should be"),
    ([], "conditions", "at least 1"),
    ("", "conditions", "at least 1"),
    ("x" * 5000, "conditions", "at most 4096"),
    (["labels.a == '1'", 7], "conditions.1", "dictionary"),
    (12, "conditions", "dictionary"),
    ({"field": "labels.a", "op": "contains", "value": ["x"]}, "conditions", "`contains` takes"),
])
def test_bad_conditions_are_422_naming_the_field(api, scope, conditions, field, says):
    base = f"{W}/scopes/{scope['id']}/routing-rules"
    err = _error(api.post(base, json={"name": "x", "conditions": conditions, "action": {"type": "archive"}}), 422,
                 "VALIDATION_ERROR")
    assert err["details"][0]["field"] == field and says in err["details"][0]["message"], err
    assert _ok(api.get(base)) == []


def test_a_syntax_error_names_its_position_in_the_details(api, scope):
    base = f"{W}/scopes/{scope['id']}/routing-rules"
    err = _error(api.post(base, json={"name": "x", "conditions": "labels.a == 'x' andd labels.b == 'y'",
                                      "action": {"type": "archive"}}), 422, "VALIDATION_ERROR")
    assert err["details"] == [{"field": "conditions", "position": 17,
                               "message": "at position 17: expected `and`, `or` or the end of the expression, "
                                          "found `andd`"}]
    assert err["message"].startswith("conditions: at position 17")
    rule = _ok(api.post(base, json={"name": "ok", "conditions": "type == 'a'", "action": {"type": "archive"}}), 201)
    err = _error(api.patch(f"{base}/{rule['id']}", json={"conditions": "type == "}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "conditions" and err["details"][0]["position"] == 9
    assert _ok(api.get(f"{base}/{rule['id']}"))["conditions"] == "type == 'a'"  # unchanged


def test_contains_over_strings_arrays_and_objects(api, scope, queues):
    base = f"{W}/scopes/{scope['id']}/routing-rules"
    _ok(api.post(base, json={"name": "c", "conditions": "body.v contains 'ab'",
                             "action": {"type": "route", "queue_id": queues["bulk"]}}), 201)
    for body, matches in (({"v": "xaby"}, True), ({"v": ["ab"]}, True), ({"v": {"ab": 1}}, True),
                          ({"v": "a-b"}, False), ({"v": ["abc"]}, False), ({"v": 5}, False), ({}, False)):
        dry = _ok(api.post(f"{base}/test", json={"message": {"body": body}}))
        assert (dry["applied"] is not None) is matches, body


@given(st.one_of(st.text(max_size=80), st.lists(st.sampled_from(
    ["labels.a", "body.x.0", "==", "<=", "=", "in", "not", "and", "or", "contains", "exists", "exists(", "(", ")",
     "[", "]", ",", "'s'", '"', "-", "-.5", "1e5", "null", "true", "é", "٣"]), max_size=15).map(" ".join)))
@settings(max_examples=500, deadline=None, derandomize=True)
def test_any_text_is_a_condition_or_an_expression_error(text):
    try:
        found = parse(text)
    except ExpressionError as e:
        assert 1 <= e.position <= len(text) + 1
    else:
        assert isinstance(found, dict) and depth(found) <= 8
