"""Conditions as expressions in the product's notation (`labels.customer_tier == 'premium'`),
translated into the JSON condition form that `work_cond` evaluates, so a rule written either way
is judged by the one evaluator on publish and in the dry run.

The grammar, read by a small tokenizer and a recursive-descent parser (nothing is evaluated):

    expression := or
    or         := and ("or" and)*
    and        := unary ("and" unary)*
    unary      := "not" unary | "(" expression ")" | "exists" "(" field ")" | comparison
    comparison := field ( ("==" | "!=" | "<" | "<=" | ">" | ">=") literal
                        | ["not"] "in" "[" [literal ("," literal)* [","]] "]"
                        | ["not"] "contains" literal
                        | ["not"] "exists" )
    field      := name ("." name | "[" string "]")*      -- one of FIELD's paths
    literal    := string ('…' or "…", with \\ escapes) | number | true | false | null

Keywords are case-insensitive. `== null` means the field is absent (or null), `!= null` that it is
present. A syntax error, an unknown operator and an unknown field are `ExpressionError`s carrying
the 1-based position of the text they were found at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import Unprocessable

# The message fields a condition reads (work_rule_subject builds what they read from).
FIELD = r"^(type|content_type|correlation_id|queue|priority\.(tier|score)|labels\.[^.]+|body(\.[^.]+)*)$"
FIELDS_READ = "type, content_type, correlation_id, queue, priority.tier, priority.score, labels.<key>, body.<path>"
MAX_CONDITION_DEPTH = 8       # levels of all/any/not a stored condition may nest
MAX_EXPRESSION_LENGTH = 4096  # characters
MAX_LIST = 1000               # literals in one `in [...]`
MAX_NESTING = 32              # parentheses and `not`s the parser follows before it stops

_COMPARE = {"==": "eq", "!=": "ne", "<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}
_KEYWORDS = {"and", "or", "not", "in", "contains", "exists", "true", "false", "null"}
_HINTS = {"=": "==", "<>": "!=", "===": "==", "!==": "!=", "&&": "and", "||": "or", "!": "not"}
_OPERATOR_CHARS = "=!<>~&|^%*+/:;?@#$`"
_DIGITS = frozenset("0123456789")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "/": "/"}


class ExpressionError(ValueError):
    """What is wrong with an expression and where (1-based character position)."""

    def __init__(self, position: int, reason: str):
        super().__init__(f"at position {position}: {reason}")
        self.position = position
        self.reason = reason


@dataclass(frozen=True)
class _Token:
    kind: str      # name, keyword, string, number, op, punct, end
    text: str      # as written (a keyword lower-cased)
    value: Any     # a literal's value
    pos: int       # 1-based


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "'\"":
            value, i2 = _string(text, i)
            out.append(_Token("string", text[i:i2], value, i + 1))
            i = i2
        elif ch in _DIGITS or (ch in "-." and text[i + 1:i + 2] in _DIGITS) \
                or (ch == "-" and text[i + 1:i + 2] == "." and text[i + 2:i + 3] in _DIGITS):
            m = _NUMBER.match(text, i)
            if m is None or (m.end() < n and (text[m.end()].isalnum() or text[m.end()] == "_")):
                raise ExpressionError(i + 1, "not a number")
            literal = m.group()
            value = float(literal) if any(c in literal for c in ".eE") else int(literal)
            if isinstance(value, float) and value in (float("inf"), float("-inf")):
                raise ExpressionError(i + 1, "number out of range")
            out.append(_Token("number", literal, value, i + 1))
            i = m.end()
        elif ch in _NAME_START:
            m = _NAME.match(text, i)
            word = m.group()
            if word.lower() in _KEYWORDS:
                out.append(_Token("keyword", word.lower(), None, i + 1))
            else:
                out.append(_Token("name", word, None, i + 1))
            i = m.end()
        elif ch in "()[],.":
            out.append(_Token("punct", ch, None, i + 1))
            i += 1
        elif ch in _OPERATOR_CHARS or ch == "-":
            j = i + 1
            while j < n and text[j] in _OPERATOR_CHARS:
                j += 1
            out.append(_Token("op", text[i:j], None, i + 1))
            i = j
        else:
            raise ExpressionError(i + 1, f"unexpected character {ch!r}")
    out.append(_Token("end", "", None, n + 1))
    return out


def _string(text: str, start: int) -> tuple[str, int]:
    """A quoted string's value and the index after its closing quote."""
    quote, i, parts = text[start], start + 1, []
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(parts), i + 1
        if ch == "\\":
            nxt = text[i + 1:i + 2]
            if nxt in _ESCAPES:
                parts.append(_ESCAPES[nxt])
                i += 2
            elif nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                parts.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
            else:
                raise ExpressionError(i + 1, "unknown escape in a string")
        else:
            parts.append(ch)
            i += 1
    raise ExpressionError(start + 1, "unterminated string")


def _show(token: _Token) -> str:
    return "the end of the expression" if token.kind == "end" else f"`{token.text}`"


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokens(text)
        self.i = 0
        self.nesting = 0

    @property
    def at(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def keyword(self, *words: str) -> bool:
        return self.at.kind == "keyword" and self.at.text in words

    def expect(self, text: str, what: str) -> _Token:
        if self.at.kind != "punct" or self.at.text != text:
            raise ExpressionError(self.at.pos, f"expected {what}, found {_show(self.at)}")
        return self.take()

    def parse(self) -> dict[str, Any]:
        if self.at.kind == "end":
            raise ExpressionError(1, "the expression is empty")
        found = self.disjunction()
        if self.at.kind != "end":
            raise self.unexpected("`and`, `or` or the end of the expression")
        return found

    def unexpected(self, wanted: str) -> ExpressionError:
        if self.at.kind == "op" and self.at.text not in _COMPARE:
            return self.unknown_operator()
        return ExpressionError(self.at.pos, f"expected {wanted}, found {_show(self.at)}")

    def unknown_operator(self) -> ExpressionError:
        text = self.at.text
        hint = f" (write `{_HINTS[text]}`)" if text in _HINTS else ""
        return ExpressionError(self.at.pos, f"unknown operator `{text}`{hint}")

    def disjunction(self) -> dict[str, Any]:
        parts = [self.conjunction()]
        while self.keyword("or"):
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else {"any": _flat(parts, "any")}

    def conjunction(self) -> dict[str, Any]:
        parts = [self.unary()]
        while self.keyword("and"):
            self.take()
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else {"all": _flat(parts, "all")}

    def unary(self) -> dict[str, Any]:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise ExpressionError(self.at.pos, f"nests deeper than {MAX_NESTING} levels")
        try:
            if self.keyword("not"):
                self.take()
                return {"not": self.unary()}
            if self.at.kind == "punct" and self.at.text == "(":
                self.take()
                inner = self.disjunction()
                self.expect(")", "`)`")
                return inner
            if self.keyword("exists") and self.tokens[self.i + 1].text == "(":
                self.take()
                self.take()
                field = self.field()
                self.expect(")", "`)`")
                return {"field": field, "op": "exists"}
            return self.comparison()
        finally:
            self.nesting -= 1

    def field(self) -> str:
        start = self.at
        if start.kind != "name":
            if start.kind == "op":
                raise self.unknown_operator()
            raise ExpressionError(start.pos, f"expected a field, found {_show(start)}")
        parts = [self.take().text]
        while self.at.kind == "punct" and self.at.text in ".[":
            if self.take().text == ".":
                if self.at.kind not in ("name", "keyword"):
                    raise ExpressionError(self.at.pos, f"expected a name after `.`, found {_show(self.at)}")
                parts.append(self.take().text)
            else:
                key = self.at
                if key.kind != "string":
                    raise ExpressionError(key.pos, f"expected a quoted key, found {_show(key)}")
                if "." in key.value or not key.value:
                    raise ExpressionError(key.pos, "a key is not empty and holds no `.`")
                parts.append(self.take().value)
                self.expect("]", "`]`")
        path = ".".join(parts)
        if not re.match(FIELD, path):
            raise ExpressionError(start.pos, f"unknown field `{path}`: a condition reads {FIELDS_READ}")
        return path

    def comparison(self) -> dict[str, Any]:
        field = self.field()
        negated = False
        if self.keyword("not"):
            self.take()
            negated = True
            if not self.keyword("in", "contains", "exists"):
                raise self.unexpected("`in`, `contains` or `exists` after `not`")
        token = self.at
        if token.kind == "op" and not negated:
            if token.text not in _COMPARE:
                raise self.unknown_operator()
            self.take()
            return _compare(field, _COMPARE[token.text], self.literal(), token)
        if self.keyword("in"):
            self.take()
            return {"field": field, "op": "not_in" if negated else "in", "value": self.list()}
        if self.keyword("contains"):
            self.take()
            value_at = self.at
            value = self.literal()
            if value is None:
                raise ExpressionError(value_at.pos, "`contains` takes a string, number or boolean")
            found = {"field": field, "op": "contains", "value": value}
            return {"not": found} if negated else found
        if self.keyword("exists"):
            self.take()
            return {"field": field, "op": "not_exists" if negated else "exists"}
        if token.kind == "name":  # a word where an operator goes: an operator we do not know
            raise ExpressionError(token.pos, f"unknown operator `{token.text}`")
        raise self.unexpected("an operator (==, !=, <, <=, >, >=, in, contains, exists)")

    def literal(self) -> Any:
        token = self.at
        if token.kind in ("string", "number"):
            self.take()
            return token.value
        if token.kind == "keyword" and token.text in ("true", "false", "null"):
            self.take()
            return {"true": True, "false": False, "null": None}[token.text]
        if token.kind == "punct" and token.text == "[":
            raise ExpressionError(token.pos, "a list follows only `in`")
        raise ExpressionError(token.pos, f"expected a value (a string, number, true, false or null), "
                                         f"found {_show(token)}")

    def list(self) -> list[Any]:
        self.expect("[", "`[` after `in`")
        items: list[Any] = []
        while not (self.at.kind == "punct" and self.at.text == "]"):
            if len(items) >= MAX_LIST:
                raise ExpressionError(self.at.pos, f"a list holds at most {MAX_LIST} values")
            items.append(self.literal())
            if self.at.kind == "punct" and self.at.text == ",":
                self.take()
            elif not (self.at.kind == "punct" and self.at.text == "]"):
                raise ExpressionError(self.at.pos, f"expected `,` or `]`, found {_show(self.at)}")
        self.take()
        return items


def _compare(field: str, op: str, value: Any, token: _Token) -> dict[str, Any]:
    if value is None and op in ("eq", "ne"):  # `== null`: absent; `!= null`: present
        return {"field": field, "op": "not_exists" if op == "eq" else "exists"}
    if op in ("lt", "lte", "gt", "gte") and (isinstance(value, bool) or value is None):
        raise ExpressionError(token.pos, f"`{token.text}` compares with a number or a string")
    return {"field": field, "op": op, "value": value}


def _flat(parts: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """`a and (b and c)` as one list of three."""
    out: list[dict[str, Any]] = []
    for p in parts:
        out.extend(p[key] if list(p) == [key] else [p])
    return out


def depth(condition: Any) -> int:
    """Levels of a JSON condition (a comparison is one)."""
    if not isinstance(condition, dict):
        return 1
    kids = list(condition.get("all") or []) + list(condition.get("any") or [])
    if isinstance(condition.get("not"), dict):
        kids.append(condition["not"])
    return 1 + max((depth(k) for k in kids), default=0)


def parse(text: str) -> dict[str, Any]:
    """The JSON condition an expression means; ExpressionError when it means none."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(MAX_EXPRESSION_LENGTH + 1, f"an expression is at most {MAX_EXPRESSION_LENGTH} characters")
    found = _Parser(text).parse()
    if depth(found) > MAX_CONDITION_DEPTH:
        raise ExpressionError(1, f"conditions nest at most {MAX_CONDITION_DEPTH} levels")
    return found


def condition_of(written: Any, field: str = "conditions") -> dict[str, Any] | None:
    """The JSON condition of a condition as a request wrote it: an object (already the JSON form),
    an expression, or a list of either (all of them). Refused as VALIDATION_ERROR naming the field,
    the item and the position."""
    if written is None or isinstance(written, dict):
        return written
    if isinstance(written, str):
        return _parsed(written, field)
    parts = [_parsed(item, f"{field}.{i}") if isinstance(item, str) else item for i, item in enumerate(written)]
    combined = {"all": parts}
    if depth(combined) > MAX_CONDITION_DEPTH:
        says = f"conditions nest at most {MAX_CONDITION_DEPTH} levels"
        raise Unprocessable(f"{field}: {says}", fields=[{"field": field, "message": says}])
    return combined


def _parsed(text: str, field: str) -> dict[str, Any]:
    try:
        return parse(text)
    except ExpressionError as e:
        raise Unprocessable(f"{field}: {e}", fields=[{"field": field, "message": str(e), "position": e.position}]) \
            from None


def written_form(written: Any) -> Any:
    """What is kept beside the JSON form so a condition reads back as written (None: the JSON form is it)."""
    return None if written is None or isinstance(written, dict) else written
