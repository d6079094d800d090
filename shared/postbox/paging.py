"""Opaque paging cursors: the one implementation for every listing whose spec leaves a cursor's form
to us (the work surface's `cursor` / `meta.next_cursor`).

A cursor names a keyset position (the key of the last row a page showed: a sequence number, a slug,
or several such) in one listing (`kind`). It is the compact JSON `[kind, *position]` in URL-safe
base64 without padding, so it travels in a query string as it is. `decode` takes back only what
`encode` writes for that listing and shape: anything else (not base64, not JSON, another listing's
cursor, a value of the wrong type or out of range, text with NUL or lone surrogates, a token longer
than MAX_TOKEN, a spelling `encode` would not write) is the surface's validation error naming the
parameter, never a query's error or a 500.

A cursor is not a secret and grants nothing: every listing still filters by the caller's tenant and
scope, so a hand-made cursor can only start the caller's own listing at another position.

Where a spec names its own paging (queues' `before`, keyed streams' `before_offset`, partitioned
queues' `limit`/`offset` as Queen's clients send them, the durable protocol's offsets), that
shape is the contract and stays.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from .errors import Invalid, PostboxError

MAX_TOKEN = 512
"""The longest cursor `decode` looks at (a slug of 256 characters encodes in under 400)."""
MAX_TEXT = 256
BIGINT = 2**63 - 1
_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")

Position = tuple[Any, ...]


def encode(kind: str, *position: int | str) -> str:
    """The cursor of `position` in the listing `kind`."""
    text = json.dumps([kind, *position], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _fits(value: Any, want: type) -> bool:
    if want is int:
        return type(value) is int and 0 <= value <= BIGINT
    if want is str:
        if not (isinstance(value, str) and 0 < len(value) <= MAX_TEXT and "\x00" not in value):
            return False
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate (`"\ud800"` in the JSON): no text a column holds
            return False
        return True
    return False


def _position(token: Any, kind: str, shape: Sequence[type]) -> Position | None:
    """The position `token` names, or None when it is not a cursor `encode(kind, …)` wrote."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN or not _ALPHABET.fullmatch(token) or len(token) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, RecursionError):
        return None
    if not isinstance(value, list) or len(value) != len(shape) + 1 or value[0] != kind:
        return None
    position = tuple(value[1:])
    if not all(_fits(v, want) for v, want in zip(position, shape, strict=True)):
        return None
    if encode(kind, *position) != token:  # another spelling of the same JSON: not one we wrote
        return None
    return position


def decode(token: str | None, kind: str, shape: Sequence[type] = (int,), *, field: str = "cursor",
           error: type[PostboxError] = Invalid) -> Position | None:
    """The position (a tuple of `shape`'s types: `int` within bigint, `str` a non-empty text of at
    most MAX_TEXT characters) that a cursor of listing `kind` names; None for no cursor (the first
    page). Anything else raises `error` (the domain's Invalid, 400, or the surface's 422 class) with
    the parameter `field` named as every surface's validation errors name one."""
    if token is None or token == "":
        return None
    found = _position(token, kind, shape)
    if found is None:
        raise error("The cursor is not one this API returned.",
                    errors=[{"loc": ["query", field], "msg": "not a cursor this API returned", "type": "cursor"}])
    return found


def page(rows: list[Any], limit: int, kind: str, key: Callable[[Any], int | str | tuple[Any, ...]]
         ) -> tuple[list[Any], str | None]:
    """`rows` fetched with limit + 1: the page and the cursor of the next one (None at the end);
    `key(row)` is the row's position (one value or a tuple)."""
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    last = key(rows[-1])
    return rows, encode(kind, *(last if isinstance(last, tuple) else (last,)))
