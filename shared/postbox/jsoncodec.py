"""JSON in and out of our statements, by orjson wherever it gives the standard library's answer.

Reading 100 messages spent a third of its Python time in `json.loads`; orjson does the same work
in a tenth of the time. orjson turns integers beyond 64 bits into floats, though, where
`json.loads` keeps them exact, so a document holding a run of 19 or more digits (the only way to
write such an integer) goes to `json.loads` instead. So does anything orjson refuses (`1e400`).
The digit runs are found by mapping every digit to `0` and searching for nineteen of them, a
tenth of what a regular expression takes on a document of 100 messages.

Encoding (`dumps`) was most of a batched send's Python time too. orjson writes what
`json.dumps(separators=(",", ":"), ensure_ascii=False)` writes, but for the spelling of a float's
exponent (`1e16`, not `1e+16`: the same number); what it cannot write the same way (NaN and the
infinities, which it turns into null; integers beyond 64 bits; keys that are not strings; lone
surrogates) goes to the standard encoder, which answers as it always did.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import psycopg
from psycopg.types.json import set_json_loads

_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def has_long_digit_run(raw: bytes) -> bool:
    """Whether the text may hold an integer beyond 64 bits, which orjson would turn into a float."""
    return _LONG_RUN in raw.translate(_DIGITS_TO_ZERO)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON as `json.loads` would, by orjson when that gives the same answer."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if not has_long_digit_run(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


_STANDARD = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_STRICT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(value: Any, *, strict: bool = False) -> bytes:
    """Compact UTF-8 JSON of `value`, as the standard library writes it (see the module's note).

    `strict` refuses NaN and the infinities (ValueError), which JSON cannot write and jsonb refuses."""
    try:
        out = orjson.dumps(value)
    except orjson.JSONEncodeError:
        out = None
    if out is None or (b"null" in out and _holds_non_finite(value)):
        return (_STRICT if strict else _STANDARD).encode(value).encode()
    return out


_SCALARS = (str, int, bool, type(None))


def _holds_non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity is anywhere in `value` (a loop that passes over scalars by exact
    type first: this runs for every document orjson writes a null into)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) in _SCALARS:
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def use_on(conn: psycopg.Connection) -> None:
    """Decode json and jsonb results of this connection with `loads`."""
    set_json_loads(loads, conn)
