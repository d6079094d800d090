"""Window assigners: which windows an event time falls in, and the tag that names them in state keys.

Every window is aligned on the UTC epoch, so a window's start (and its state key) is a pure function
of the event time: a replayed batch lands in exactly the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_MS = {"second": 1_000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 7 * 86_400_000}
_MONDAY_MS = 4 * 86_400_000  # 1970-01-01 was a Thursday; weeks start on Monday 1970-01-05


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds and `Z` (the window key)."""
    dt = datetime.fromtimestamp(ms // 1000, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive whole number of seconds")
    return value


class Window:
    """Base of the four window kinds; `grace_ms` delays closing past the window's end."""

    kind = ""
    tag = ""

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def assign(self, ts_ms: int) -> list[tuple[int, int]]:
        """The (start, end) of every window containing ts_ms (sessions are handled by the fold)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Tumbling(Window):
    seconds: int
    kind = "tumbling"

    def __post_init__(self) -> None:
        _positive_int("tumbling window size", self.seconds)

    @property
    def tag(self) -> str:  # type: ignore[override]
        return f"tumb:{self.seconds}"

    def config(self) -> dict[str, Any]:
        return {"size": self.seconds}

    def assign(self, ts_ms: int) -> list[tuple[int, int]]:
        size = self.seconds * 1000
        start = ts_ms // size * size
        return [(start, start + size)]


@dataclass(frozen=True)
class Sliding(Window):
    seconds: int
    slide: int
    kind = "sliding"

    def __post_init__(self) -> None:
        _positive_int("sliding window size", self.seconds)
        _positive_int("sliding window slide", self.slide)
        if self.seconds % self.slide:
            raise ValueError("a sliding window's size must be a multiple of its slide")

    @property
    def tag(self) -> str:  # type: ignore[override]
        return f"slide:{self.seconds}:{self.slide}"

    def config(self) -> dict[str, Any]:
        return {"size": self.seconds, "slide": self.slide}

    def assign(self, ts_ms: int) -> list[tuple[int, int]]:
        size, slide = self.seconds * 1000, self.slide * 1000
        last = ts_ms // slide * slide
        return [(s, s + size) for s in range(last - size + slide, last + 1, slide)]


@dataclass(frozen=True)
class Cron(Window):
    every: str
    kind = "cron"

    def __post_init__(self) -> None:
        if self.every not in _MS:
            raise ValueError(f"cron windows align to one of {', '.join(_MS)}")

    @property
    def tag(self) -> str:  # type: ignore[override]
        return f"cron:{self.every}"

    def config(self) -> dict[str, Any]:
        return {"every": self.every}

    def assign(self, ts_ms: int) -> list[tuple[int, int]]:
        size = _MS[self.every]
        shift = _MONDAY_MS if self.every == "week" else 0
        start = (ts_ms - shift) // size * size + shift
        return [(start, start + size)]


@dataclass(frozen=True)
class Session(Window):
    gap: int
    kind = "session"

    def __post_init__(self) -> None:
        _positive_int("session gap", self.gap)

    @property
    def tag(self) -> str:  # type: ignore[override]
        return f"sess:{self.gap}"

    def config(self) -> dict[str, Any]:
        return {"gap": self.gap}

    def assign(self, ts_ms: int) -> list[tuple[int, int]]:
        raise TypeError("sessions are assigned by the fold, not by event time alone")


DEFAULT_IDLE_FLUSH_MS = {"tumbling": 5_000, "sliding": 5_000, "session": 1_000, "cron": 30_000}
