"""What every request's input must be before any SQL sees it: one rule for every surface.

PostgreSQL refuses some values a JSON parser or a URL decoder accepts (a NUL character in text,
lone UTF-16 surrogates, NaN and the infinities in jsonb, integers beyond a column), and a parser
that recurses overflows its stack on JSON nested thousands deep. Each check here raises a
`BadInput` naming where the value was (`loc`, as a validation error would), so the surface answers
a 4xx in its own envelope and nothing is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import orjson

from . import jsoncodec
from .errors import Invalid, TooLarge, UnsupportedMediaType

MAX_JSON_DEPTH = 127
"""Arrays and objects nest at most this deep (the durable surface's JSON mode uses the same cap)."""

MAX_REQUEST_BYTES = 6 * 1024 * 1024
"""A request payload (AWS Lambda's synchronous invocation limit); API Gateway forwards up to 10 MB."""

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

JSON_TYPES = ("application/json",)

_NUL_ESCAPE = b"\\u0000"  # the only way a NUL can be in valid JSON text


class BadInput(Invalid):
    """An input value refused before it reached the domain; `loc` says where, as pydantic's does."""

    def __init__(self, loc: tuple[str | int, ...], message: str, *, code: str = "invalid_input") -> None:
        where = ".".join(str(p) for p in loc[1:]) or str(loc[0])
        super().__init__(f"{where}: {message}", code=code)
        self.loc = loc
        self.reason = message


def text_problem(value: str) -> str | None:
    """Why PostgreSQL would refuse this text, or None when it would not."""
    if "\x00" in value:
        return "must not contain the NUL character (U+0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None


def check_text(value: str, loc: tuple[str | int, ...]) -> str:
    """The text, or BadInput when PostgreSQL could not store it."""
    problem = text_problem(value)
    if problem:
        raise BadInput(loc, problem, code="invalid_text")
    return value


def check_params(params: dict[str, str] | None, where: str) -> None:
    """Every path or query parameter (name and value) is storable text."""
    for name, value in (params or {}).items():
        check_text(name, (where, name))
        check_text(value, (where, name))


def is_json_type(content_type: str | None) -> bool:
    """`application/json` (any parameters) or no Content-Type at all: the one content-type rule."""
    if not content_type or not content_type.strip():
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media in JSON_TYPES


def require_json_type(content_type: str | None) -> None:
    if not is_json_type(content_type):
        raise UnsupportedMediaType(
            f"Content-Type must be application/json (got {content_type.split(';', 1)[0].strip()!r}).",
            code="unsupported_media_type",
        )


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_ONE_BRACKET = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nests_deeper_than(text: bytes, limit: int) -> bool:
    """Whether valid JSON text nests its arrays and objects more than `limit` deep, read from the text
    in C-speed passes rather than by walking the parsed value in Python (a tenth of the time for a
    push of 100 items): with its strings removed and only its brackets kept, one kind of them, each
    pass that removes every innermost `[]` takes exactly one level off."""
    skeleton = _STRING.sub(b"", text).translate(_ONE_BRACKET, _NOT_BRACKETS)
    for _ in range(limit):
        if not skeleton:
            return False
        skeleton = skeleton.replace(b"[]", b"")
    return bool(skeleton)


def _walk(value: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(loc, problem) for each string or number PostgreSQL would refuse, depth first, iteratively."""
    stack = [(value, loc)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                yield where, problem
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                yield where, "must be a finite number (NaN and Infinity are not JSON)"
        elif isinstance(item, dict):
            for k, v in item.items():
                problem = text_problem(k)
                if problem:
                    yield (*where, k), f"a member name {problem}"
                stack.append((v, (*where, k)))
        elif isinstance(item, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(item))


def parse_json(raw: bytes | str | None, *, loc: tuple[str | int, ...] = ("body",),
               max_bytes: int = MAX_REQUEST_BYTES) -> Any:
    """A JSON document read under every rule above, or BadInput/TooLarge naming the problem.

    None (no body) stays None. The document is valid UTF-8, at most `max_bytes`, nests at most
    MAX_JSON_DEPTH deep, and holds no text or number PostgreSQL refuses."""
    if raw is None or raw == b"" or raw == "":
        return None
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if len(data) > max_bytes:
        raise TooLarge(f"{loc[0]}: a request body is at most {max_bytes} bytes.", code="body_too_large")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(loc, f"not valid UTF-8 (byte {e.start})", code="invalid_encoding") from None
    standard = jsoncodec.has_long_digit_run(data)
    if not standard:
        try:
            value = orjson.loads(data)  # refuses NaN, Infinity, 1e400 and lone surrogates itself
        except orjson.JSONDecodeError:  # also past orjson's own depth limit (1024)
            standard = True
    if standard:  # the standard parser keeps big integers exact but lets those through: walk below
        try:
            value = json.loads(data)
        except RecursionError:
            raise BadInput(loc, f"JSON nests deeper than {MAX_JSON_DEPTH} levels", code="too_deep") from None
        except ValueError as e:
            raise BadInput(loc, f"not valid JSON ({e})", code="invalid_json") from None
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH and nests_deeper_than(data, MAX_JSON_DEPTH):
        raise BadInput(loc, f"JSON nests deeper than {MAX_JSON_DEPTH} levels", code="too_deep")
    if standard or _NUL_ESCAPE in data:
        for where, problem in _walk(value, loc):
            raise BadInput(where, problem, code="invalid_text")
    return value
