"""One partition's batch through a query: pure logic, no I/O, so replaying a batch folds identically.

The runner calls, in order: `prepare` (stateless operators over the popped messages), `needed_keys`
(the state rows the batch touches), `stream_time` (how far time advances, given the watermark),
then `fold` with the rows read, which returns the state ops, the records to emit and the ack.
`flush` is the idle-flush variant: it closes windows that are ripe by the wall clock, deleting each
row only if it still holds what was read.

A window row records its `pane`: the transactionId of the first message folded into it. A window
closed by an idle flush and then reached again by later messages starts a new row, a new pane, so
its second emission carries another sink id instead of repeating (and being deduplicated into)
the first one's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .keys import OPEN, SEP, WATERMARK, split_key, state_key
from .query import Op, Query
from .windows import iso_ms


@dataclass(frozen=True)
class Message:
    """A popped source message, as the pop route returns it."""

    id: str              # transactionId
    created_ms: int
    data: Any
    partition_id: str
    lease_id: str | None = None


@dataclass
class Record:
    value: Any
    user_key: str
    ts_ms: int
    source: int          # index of the source message it came from (a gate acks whole messages)


@dataclass(frozen=True)
class Emit:
    """A record for the sink; `origin` makes its transaction id deterministic across replays."""

    value: Any
    origin: str


@dataclass
class FoldResult:
    state_ops: list[dict[str, Any]] = field(default_factory=list)
    emits: list[Emit] = field(default_factory=list)
    ack_count: int = 0
    release_lease: bool = True
    dropped_late: int = 0


def to_ms(value: Any) -> int:
    """Epoch ms from an int/float (ms), an ISO-8601 string or a datetime."""
    if isinstance(value, bool):
        raise TypeError("a timestamp cannot be a boolean")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    raise TypeError(f"not a timestamp: {value!r}")


def _apply(ops: list[Op], value: Any) -> list[Any]:
    values = [value]
    for op in ops:
        if op.kind == "map":
            values = [op.fn(v) for v in values]
        elif op.kind == "filter":
            values = [v for v in values if op.fn(v)]
        elif op.kind == "flat_map":
            values = [x for v in values for x in (op.fn(v) or ())]
    return values


def order(messages: list[Message]) -> list[Message]:
    """By createdAt, ties in pop (log) order."""
    return [m for _, _, m in sorted((m.created_ms, i, m) for i, m in enumerate(messages))]


def prepare(query: Query, messages: list[Message]) -> list[Record]:
    """Stateless operators and key_by over each message, in order; records keep their source index."""
    out: list[Record] = []
    for index, message in enumerate(messages):
        values: list[tuple[Any, str]] = [(message.data, message.partition_id)]
        for op in query.pre_ops:
            if op.kind == "key_by":
                values = [(v, str(op.fn(v))) for v, _ in values]
            else:
                values = [(x, k) for v, k in values for x in _apply([op], v)]
        for value, key in values:
            ts = to_ms(query.timing.event_time(value)) if query.timing.event_time else message.created_ms
            out.append(Record(value, key, ts, index))
    return out


def _watermark(state: dict[str, Any]) -> int | None:
    row = state.get(WATERMARK)
    return row.get("eventTimeMs") if isinstance(row, dict) else None


def stream_time(query: Query, messages: list[Message], records: list[Record], state: dict[str, Any]) -> int | None:
    """Event time: the watermark max(previous, max event time - allowed lateness). Otherwise the
    largest createdAt of the batch."""
    if query.timing.event_time is None:
        return max((m.created_ms for m in messages), default=None)
    previous = _watermark(state)
    candidates = [r.ts_ms - query.timing.allowed_lateness_ms for r in records]
    if previous is not None:
        candidates.append(previous)
    return max(candidates, default=None)


def needed_keys(query: Query, records: list[Record]) -> list[str]:
    """The state rows a batch touches (the watermark included); ripe rows are read separately."""
    keys: dict[str, None] = {WATERMARK: None}
    if query.gate_fn is not None:
        for r in records:
            keys[state_key("gate", "", r.user_key)] = None
    elif query.window is not None and query.window.kind == "session":
        for r in records:
            keys[state_key(query.tag, OPEN, r.user_key)] = None
    elif query.window is not None:
        for r in records:
            for start, _ in query.window.assign(r.ts_ms):
                keys[state_key(query.tag, iso_ms(start), r.user_key)] = None
    return list(keys)


def _window_emits(query: Query, key: str, row: dict[str, Any], origin: str | None = None) -> list[Emit]:
    parts = split_key(key)
    user_key = parts[2] if parts else ""
    start = row.get("sessionStart", row.get("windowStart"))
    out = {"key": user_key, "windowStart": start, "windowEnd": row["windowEnd"],
           "value": query.fold.result(row["acc"])}  # type: ignore[union-attr]
    base = origin or key
    if row.get("pane") is not None:
        base = f"{base}{SEP}{row['pane']}"
    return [Emit(v, f"{base}{SEP}{i}") for i, v in enumerate(_apply(query.post_ops, out))]


def _session_key(query: Query, start_ms: int, user_key: str) -> str:
    return state_key(query.tag, iso_ms(start_ms), user_key)


def fold(query: Query, messages: list[Message], records: list[Record], state: dict[str, Any]) -> FoldResult:
    """Fold a prepared batch into the rows read (`state`: key -> value) and close what is ripe."""
    if query.gate_fn is not None:
        return _gate(query, messages, records, state)
    result = FoldResult(ack_count=len(messages))
    rows = {k: copy.deepcopy(v) for k, v in state.items() if split_key(k) is not None}
    stored = set(rows)
    dirty: set[str] = set()
    late_origin: dict[str, str] = {}
    previous_wm = _watermark(state) if query.timing.event_time is not None else None
    grace = query.timing.grace_ms
    fold_ = query.fold
    assert fold_ is not None and query.window is not None
    session = query.window.kind == "session"
    gap = query.window.gap * 1000 if session else 0  # type: ignore[attr-defined]

    for r in records:
        if session:
            if previous_wm is not None and r.ts_ms + gap + grace <= previous_wm and not query.timing.include_late:
                result.dropped_late += 1
                continue
            key = state_key(query.tag, OPEN, r.user_key)
            row = rows.get(key)
            if row is not None and r.ts_ms > row["lastEventTime"] + gap:
                closed = _session_key(query, row["sessionStart"], r.user_key)
                result.emits += _window_emits(query, closed, row)
                row = None
            if row is None:
                row = {"acc": fold_.initial(), "sessionStart": r.ts_ms, "lastEventTime": r.ts_ms,
                       "pane": messages[r.source].id}
            row["acc"] = fold_.add(row["acc"], r.value)
            row["sessionStart"] = min(row["sessionStart"], r.ts_ms)
            row["lastEventTime"] = max(row["lastEventTime"], r.ts_ms)
            row["windowEnd"] = row["lastEventTime"] + gap
            rows[key] = row
            dirty.add(key)
            continue
        for start, end in query.window.assign(r.ts_ms):
            key = state_key(query.tag, iso_ms(start), r.user_key)
            if previous_wm is not None and end + grace <= previous_wm:
                if not query.timing.include_late:
                    result.dropped_late += 1
                    continue
                late_origin.setdefault(key, f"{key}{SEP}late{SEP}{messages[r.source].id}")
            row = rows.get(key) or {"acc": fold_.initial(), "windowStart": start, "windowEnd": end,
                                    "pane": messages[r.source].id}
            row["acc"] = fold_.add(row["acc"], r.value)
            rows[key] = row
            dirty.add(key)

    now = stream_time(query, messages, records, state)
    for key in sorted(rows):
        row = rows[key]
        end = row.get("windowEnd")
        if now is not None and isinstance(end, int | float) and end + grace <= now:
            origin = late_origin.get(key)
            if session:
                origin = _session_key(query, row["sessionStart"], split_key(key)[2])  # type: ignore[index]
            result.emits += _window_emits(query, key, row, origin)
            if key in stored:
                result.state_ops.append({"type": "delete", "key": key})
        elif key in dirty:
            result.state_ops.append({"type": "upsert", "key": key, "value": row})
    if query.timing.event_time is not None and now is not None and now != previous_wm:
        result.state_ops.append({"type": "upsert", "key": WATERMARK, "value": {"eventTimeMs": now}})
    return result


def flush(query: Query, ripe_rows: dict[str, Any]) -> FoldResult:
    """Idle flush: emit the ripe windows read from state and delete their rows (no ack), each delete
    guarded by the value read (`expect`), so a row a fold changed meanwhile fails the flush."""
    result = FoldResult(ack_count=0)
    for key in sorted(ripe_rows):
        row = ripe_rows[key]
        parts = split_key(key)
        if parts is None or not isinstance(row, dict) or "acc" not in row:
            continue
        expect = copy.deepcopy(row)
        origin = key
        if parts[1] == OPEN:
            origin = _session_key(query, row["sessionStart"], parts[2])
        result.emits += _window_emits(query, key, row, origin)
        result.state_ops.append({"type": "delete", "key": key, "expect": expect})
    return result


def _gate(query: Query, messages: list[Message], records: list[Record], state: dict[str, Any]) -> FoldResult:
    """Admit whole source messages while the gate allows every record of them; the first refusal
    stops the batch, the count acked maps back to source messages (not to records)."""
    result = FoldResult(ack_count=len(messages))
    rows = {k: copy.deepcopy(v) for k, v in state.items() if k != WATERMARK}
    dirty: set[str] = set()
    by_source: dict[int, list[Record]] = {}
    for r in records:
        by_source.setdefault(r.source, []).append(r)
    for index, message in enumerate(messages):
        trial = {}
        admitted: list[Record] = []
        refused = False
        for r in by_source.get(index, []):
            key = state_key("gate", "", r.user_key)
            if key not in trial:
                trial[key] = copy.deepcopy(rows.get(key, {}))
            if not query.gate_fn(r.value, trial[key]):  # type: ignore[misc]
                refused = True
                break
            admitted.append(r)
        if refused:
            result.ack_count = index
            result.release_lease = False
            break
        rows.update(trial)
        dirty.update(trial)
        for n, r in enumerate(admitted):
            result.emits += [Emit(v, f"gate{SEP}{message.id}{SEP}{n}{SEP}{i}")
                             for i, v in enumerate(_apply(query.post_ops, r.value))]
    result.state_ops = [{"type": "upsert", "key": k, "value": rows[k]} for k in sorted(dirty)]
    return result
