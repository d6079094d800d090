"""Durations ("7d", "12h", "1h30m", "forever") and the timestamps streams answer with."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from .. import config
from ..errors import Invalid

FOREVER = "forever"
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_PART = re.compile(r"(\d{1,9})(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"^(?:\d{1,9}(?:ms|s|m|h|d|w))+$")
MAX_RETENTION_MS = 100 * 365 * 86_400_000


def parse_duration(text: str, *, field: str = "retention") -> int | None:
    """Milliseconds for a duration, None for "forever"; Invalid for anything else."""
    value = text.strip().lower()
    if value == FOREVER:
        return None
    if not _WHOLE.match(value):
        raise Invalid(f"{field} must be a duration such as \"7d\", \"12h\" or \"90m\", or \"forever\".",
                      code="invalid_" + field)
    ms = sum(int(n) * _UNITS_MS[unit] for n, unit in _PART.findall(value))
    if ms <= 0 or ms > MAX_RETENTION_MS:
        raise Invalid(f"{field} must be longer than zero and at most 100 years.", code="invalid_" + field)
    return ms


def default_retention() -> str:
    """DEFAULT_RETENTION for streams that set none (7d unless the deployment says otherwise)."""
    return config.settings().streams_default_retention


def default_max_backlog() -> int | None:
    """The backlog cap of streams that set none (none unless the deployment sets one)."""
    return config.settings().streams_default_max_backlog


def iso(value: datetime | None) -> str | None:
    """`2026-08-31T10:15:00.000Z`: UTC with milliseconds, as the spec shows."""
    if value is None:
        return None
    utc = value.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_instant(text: str, *, field: str) -> datetime:
    """An RFC 3339 timestamp with a zone ("2026-08-31T10:15:00Z" or "+02:00")."""
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
        value.astimezone(UTC)  # within years 1-9999 in UTC too, as every time we store and answer is
    except (ValueError, OverflowError):
        value = None
    if value is None or value.tzinfo is None:
        raise Invalid(f"{field} must be an RFC 3339 timestamp with a zone, e.g. \"2026-08-31T10:15:00Z\".",
                      code="invalid_" + field)
    return value
