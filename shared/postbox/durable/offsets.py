"""Offsets and cursors as the protocol sees them: opaque, sortable strings, never `-1` or `now`.

An offset is `<epoch>_<position>`, each part 16 zero-padded digits, so comparing two offsets as
strings compares positions. The position counts the stream's appends (its log records) before it.
"""

from __future__ import annotations

import random
import re
import time

START = "-1"
NOW = "now"
_OFFSET = re.compile(r"^(\d{16})_(\d{16})$")

CURSOR_INTERVAL_S = 20
_CURSOR_EPOCH_S = 1728432000  # 2024-10-09T00:00:00Z, the reference server's epoch


def format_offset(position: int) -> str:
    return f"{0:016d}_{position:016d}"


def parse_offset(text: str) -> int | None:
    """The position an offset names, or None when it is not one this server could have given."""
    m = _OFFSET.match(text)
    if not m or int(m.group(1)) != 0:
        return None
    return int(m.group(2))


def response_cursor(client_cursor: str | None) -> str:
    """`Stream-Cursor`: the current 20 s interval, or strictly past the client's own cursor (so
    a CDN never serves a client the same cached long-poll answer twice)."""
    current = int((time.time() - _CURSOR_EPOCH_S) // CURSOR_INTERVAL_S)
    try:
        theirs = int(client_cursor) if client_cursor else None
    except ValueError:
        theirs = None
    if theirs is None or theirs < current:
        return str(current)
    jitter_s = random.randint(1, 3600)
    return str(theirs + max(1, -(-jitter_s // CURSOR_INTERVAL_S)))
