"""The query builder: an operator chain in Python, and the config hash that names its shape.

    Query("orders.per_minute", source="orders")
        .map(parse).filter(is_paid).key_by(lambda o: o["customer"])
        .tumbling(60, event_time=lambda o: o["ts"], allowed_lateness=5)
        .aggregate(count=count(), total=sum_of(lambda o: o["amount"]))
        .to("orders.per_minute")

Shape rules: stateless `map`/`filter`/`flat_map`/`key_by` first, then exactly one window followed by
`reduce`/`aggregate` (or a `gate` instead of both), then more stateless operators, then one sink:
`to(queue)` or `foreach(fn)`. The config hash covers each operator's kind and settings, never user
functions nor queue names, so editing a lambda keeps the accumulators while a changed fold shape
is caught at registration (409).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .aggregates import Aggregate, Field, Fold, Reduce
from .windows import DEFAULT_IDLE_FLUSH_MS, Cron, Session, Sliding, Tumbling, Window

STATELESS = ("map", "filter", "flat_map", "key_by")


@dataclass
class Op:
    kind: str
    fn: Callable[..., Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.config}


@dataclass(frozen=True)
class Timing:
    """How a window reads time: event time (a function of the record) or the message's createdAt."""

    event_time: Callable[[Any], Any] | None = None
    allowed_lateness_ms: int = 0
    grace_ms: int = 0
    include_late: bool = False
    idle_flush_ms: int | None = None

    def config(self) -> dict[str, Any]:
        return {"eventTime": self.event_time is not None, "allowedLateness": self.allowed_lateness_ms,
                "grace": self.grace_ms, "includeLate": self.include_late}


class Query:
    """A streaming query over one source queue; `name` is its identity within the tenant."""

    def __init__(self, name: str, source: str) -> None:
        if not name or not source:
            raise ValueError("a query needs a name and a source queue")
        self.name = name
        self.source = source
        self.ops: list[Op] = []
        self.window: Window | None = None
        self.timing = Timing()
        self.fold: Fold | None = None
        self.gate_fn: Callable[[Any, dict], bool] | None = None
        self.sink_queue: str | None = None
        self.sink_partition: str | Callable[[Any], str] = "Default"
        self.foreach_fn: Callable[[Any], Any] | None = None

    # ---- stateless operators ----------------------------------------------------------------
    def _add(self, kind: str, fn: Callable[..., Any] | None = None, **config: Any) -> Query:
        if self.sink_queue is not None or self.foreach_fn is not None:
            raise ValueError(f"{kind}: the sink must be the last operator")
        self.ops.append(Op(kind, fn, config))
        return self

    def map(self, fn: Callable[[Any], Any]) -> Query:
        return self._add("map", fn)

    def filter(self, fn: Callable[[Any], bool]) -> Query:
        return self._add("filter", fn)

    def flat_map(self, fn: Callable[[Any], Any]) -> Query:
        return self._add("flat_map", fn)

    def key_by(self, fn: Callable[[Any], Any]) -> Query:
        if self._stage() != "pre":
            raise ValueError("key_by goes before the window")
        return self._add("key_by", fn)

    # ---- windows ----------------------------------------------------------------------------
    def _window(self, window: Window, event_time: Callable[[Any], Any] | None, allowed_lateness: float,
                grace: float, include_late: bool, idle_flush_ms: int | None) -> Query:
        if self._stage() != "pre":
            raise ValueError("a query has exactly one window (or one gate), before its fold")
        if allowed_lateness < 0 or grace < 0:
            raise ValueError("allowed_lateness and grace must not be negative")
        self.window = window
        self.timing = Timing(event_time, int(allowed_lateness * 1000), int(grace * 1000), include_late,
                             idle_flush_ms)
        return self._add(window.kind, None, **window.config(), **self.timing.config())

    def tumbling(self, seconds: int, *, event_time: Callable[[Any], Any] | None = None, allowed_lateness: float = 0,
                 grace: float = 0, include_late: bool = False, idle_flush_ms: int | None = None) -> Query:
        return self._window(Tumbling(seconds), event_time, allowed_lateness, grace, include_late, idle_flush_ms)

    def sliding(self, seconds: int, slide: int, *, event_time: Callable[[Any], Any] | None = None,
                allowed_lateness: float = 0, grace: float = 0, include_late: bool = False,
                idle_flush_ms: int | None = None) -> Query:
        return self._window(Sliding(seconds, slide), event_time, allowed_lateness, grace, include_late, idle_flush_ms)

    def cron(self, every: str, *, event_time: Callable[[Any], Any] | None = None, allowed_lateness: float = 0,
             grace: float = 0, include_late: bool = False, idle_flush_ms: int | None = None) -> Query:
        return self._window(Cron(every), event_time, allowed_lateness, grace, include_late, idle_flush_ms)

    def session(self, gap: int, *, event_time: Callable[[Any], Any] | None = None, allowed_lateness: float = 0,
                grace: float = 0, include_late: bool = False, idle_flush_ms: int | None = None) -> Query:
        return self._window(Session(gap), event_time, allowed_lateness, grace, include_late, idle_flush_ms)

    # ---- folds ------------------------------------------------------------------------------
    def reduce(self, fn: Callable[[Any, Any], Any], initial: Any = None) -> Query:
        return self._set_fold(Reduce(fn, initial))

    def aggregate(self, **fields: Field) -> Query:
        return self._set_fold(Aggregate(fields))

    def _set_fold(self, fold: Fold) -> Query:
        if self._stage() != "window":
            raise ValueError(f"{fold.kind} follows a window")
        self.fold = fold
        return self._add(fold.kind, None, **fold.config())

    def gate(self, fn: Callable[[Any, dict], bool]) -> Query:
        """Admit records in order while fn(record, state) is true; `state` is a per-key dict fn may
        change. The first refusal stops the batch: what came before is acked (lease kept on the rest)."""
        if self._stage() != "pre":
            raise ValueError("a gate replaces the window and fold; it cannot follow one")
        self.gate_fn = fn
        return self._add("gate", fn)

    # ---- sinks ------------------------------------------------------------------------------
    def to(self, queue: str, partition: str | Callable[[Any], str] = "Default") -> Query:
        if not queue:
            raise ValueError("to() needs a queue name")
        self._check_complete()
        self._add("to")
        self.sink_queue = queue
        self.sink_partition = partition
        return self

    def foreach(self, fn: Callable[[Any], Any]) -> Query:
        self._check_complete()
        self._add("foreach")
        self.foreach_fn = fn
        return self

    # ---- shape ------------------------------------------------------------------------------
    def _stage(self) -> str:
        if self.gate_fn is not None or self.fold is not None:
            return "post"
        return "window" if self.window is not None else "pre"

    def _check_complete(self) -> None:
        if self.window is not None and self.fold is None:
            raise ValueError("a window needs a reduce or aggregate after it")
        if self.window is None and self.gate_fn is None:
            raise ValueError("a query needs a window with a fold, or a gate")

    @property
    def tag(self) -> str:
        return self.window.tag if self.window is not None else "gate"

    @property
    def pre_ops(self) -> list[Op]:
        out = []
        for op in self.ops:
            if op.kind not in STATELESS:
                break
            out.append(op)
        return out

    @property
    def post_ops(self) -> list[Op]:
        kinds = [op.kind for op in self.ops]
        start = max(kinds.index(k) for k in ("reduce", "aggregate", "gate") if k in kinds) + 1
        return [op for op in self.ops[start:] if op.kind in ("map", "filter", "flat_map")]

    @property
    def idle_flush_ms(self) -> int:
        if self.timing.idle_flush_ms:
            return self.timing.idle_flush_ms
        return DEFAULT_IDLE_FLUSH_MS.get(self.window.kind if self.window else "", 5_000)

    def describe(self) -> list[dict[str, Any]]:
        return [op.describe() for op in self.ops]

    def config_hash(self) -> str:
        """SHA-256 (hex) of the compact JSON list of {kind, ...config} of each operator."""
        self._check_complete()
        raw = json.dumps(self.describe(), separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(raw.encode()).hexdigest()
