"""JSON mode: validate an append, keep each message as written (minus insignificant whitespace),
and split a top-level array into its elements. Messages of one append are stored joined by
newlines, which minified JSON never contains."""

from __future__ import annotations

import json

from postbox.errors import Invalid

MAX_DEPTH = 127
_WS = frozenset(" \t\r\n")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def minify(text: str) -> str:
    """The text without whitespace outside strings; strings, numbers and members untouched."""
    out: list[str] = []
    i, n, depth, deepest = 0, len(text), 0, 0
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while True:
                j = text.index('"', j)
                k = j - 1
                while text[k] == "\\":
                    k -= 1
                if (j - 1 - k) % 2 == 0:
                    break
                j += 1
            out.append(text[i : j + 1])
            i = j + 1
            continue
        if c in _WS:
            i += 1
            continue
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
        out.append(c)
        i += 1
    if deepest > MAX_DEPTH:
        raise Invalid(f"JSON nests deeper than {MAX_DEPTH} levels.", code="INVALID_REQUEST")
    return "".join(out)


def split_top_level(array_text: str) -> list[str]:
    """The element texts of a minified JSON array."""
    inner = array_text[1:-1]
    parts, depth, start, in_str, escaped = [], 0, 0, False, False
    for i, c in enumerate(inner):
        if in_str:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if inner:
        parts.append(inner[start:])
    return parts


def messages_of(body: bytes, *, allow_empty: bool = False) -> list[str]:
    """The messages one JSON append carries: a top-level array's elements, or the one value."""
    try:
        text = body.decode("utf-8")
        json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise Invalid(f"Invalid JSON: {e}", code="INVALID_REQUEST") from None
    except RecursionError:  # the parser recurses once per level: thousands deep exhaust its stack
        raise Invalid(f"JSON nests deeper than {MAX_DEPTH} levels.", code="INVALID_REQUEST") from None
    compact = minify(text)
    if compact.startswith("["):
        items = split_top_level(compact)
        if not items and not allow_empty:
            raise Invalid("An empty JSON array appends nothing.", code="EMPTY_APPEND")
        return items
    return [compact]


def pack(messages: list[str]) -> bytes:
    return "\n".join(messages).encode()


def unpack(payload: bytes) -> list[str]:
    return payload.decode().split("\n") if payload else []


def as_array(payloads: list[bytes]) -> bytes:
    return b"[" + b",".join(p.replace(b"\n", b",") for p in payloads if p) + b"]"


def as_ndjson(payloads: list[bytes]) -> bytes:
    return b"".join(p + b"\n" for p in payloads if p)
