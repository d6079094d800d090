"""State keys: `{operatorTag}\\x1f{windowKey}\\x1f{userKey}`, so a prefix read returns one operator's rows.

Keys that start with `__` are bookkeeping (the watermark), never windows.
"""

from __future__ import annotations

SEP = "\u001f"
WATERMARK = "__wm__"
OPEN = "open"  # the window key of a session still open


def state_key(tag: str, window_key: str, user_key: str) -> str:
    return f"{tag}{SEP}{window_key}{SEP}{user_key}"


def operator_prefix(tag: str) -> str:
    return tag + SEP


def split_key(key: str) -> tuple[str, str, str] | None:
    """(tag, window key, user key), or None for a bookkeeping key."""
    if key.startswith("__"):
        return None
    parts = key.split(SEP, 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None
