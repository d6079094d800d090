"""The runner: pop, fold, and commit one cycle per partition; idle-flush partitions that went quiet.

The cycle is the only commit point: state, sink pushes and the source ack land together or not at
all, guarded by the lease. A runner killed anywhere before the cycle commits leaves nothing behind;
the lease expires, the batch redelivers, and the fold (pure, over the same committed state) makes
the same output. The idle flush asks Postbox which partitions hold ripe windows and are quiet
(nothing left to consume, no lease held), whoever folded them, and commits each flush only if the
partition is still quiet and its rows unchanged: any number of runners and hosted sweeps may run
one query. Sink messages carry transaction ids derived from the query, the partition, the window's
pane and the payload, so a cycle retried after a lost response cannot duplicate them, and a
different emission of a window is never taken for a duplicate.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .fold import Emit, FoldResult, Message, flush, fold, needed_keys, order, prepare, stream_time, to_ms
from .keys import SEP, operator_prefix
from .query import Query


class CycleFailed(RuntimeError):
    """A cycle answered `success: false`: nothing was committed, the batch will redeliver. `code`
    says why (`not_quiet` and `state_changed` refuse an idle flush that lost a race)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code

log = logging.getLogger("postbox.flows")
REPORT_EVERY_S = 10.0  # how often a running runner logs what it has done
_IDS = uuid.UUID("5f0c1c7e-6b7a-4d2e-9f3a-2d4c8e1b7a60")  # namespace of sink transaction ids


class Runner:
    """Runs one query against a client (HttpClient or LocalClient)."""

    def __init__(self, query: Query, client: Any, *, batch: int = 200, partitions: int = 4, wait_ms: int = 1000,
                 reset: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.query = query
        self.client = client
        self.batch = batch
        self.partitions = partitions
        self.wait_ms = wait_ms
        self.reset = reset
        self.clock = clock
        self.query_id: str | None = None
        self.group = ""
        self._flushed_at = float("-inf")       # last idle flush (monotonic)
        self._held: dict[str, tuple[float, list[dict[str, Any]]]] = {}  # gate: (retry at, the leased tail)
        self.gate_retry_ms = 1000
        self.stats = {"messages": 0, "cycles": 0, "emitted": 0, "failed_cycles": 0, "failed_folds": 0,
                      "dropped_late": 0, "flushes_skipped": 0}
        self.behind_ms = 0  # age of the oldest event of the last pass (0 when a pass found nothing)

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self) -> str:
        """Register (idempotent); a changed operator chain is a 409 unless the runner resets."""
        q = self.query
        answer = self.client.register(q.name, q.source, q.sink_queue, q.config_hash(), self.reset)
        self.query_id = answer["query_id"]
        self.group = f"streams.{self.query_id}"
        return self.query_id

    def run(self, stop: threading.Event | None = None, duration_s: float | None = None) -> None:
        """Loop until `stop` is set (or `duration_s` passes): batches, then idle flush when due."""
        if self.query_id is None:
            self.start()
        deadline = time.monotonic() + duration_s if duration_s is not None else None
        report_at = time.monotonic() + REPORT_EVERY_S
        log.info("flows runner %s: consuming %s as %s", self.query.name, self.query.source, self.group)
        try:
            while not (stop is not None and stop.is_set()) and (deadline is None or time.monotonic() < deadline):
                try:
                    self.run_once()
                    self.flush_idle()
                except Exception:
                    log.exception("flows runner %s: pass failed; the batch redelivers after its lease",
                                  self.query.name)
                    time.sleep(0.5)
                if time.monotonic() >= report_at:
                    self._report()
                    report_at = time.monotonic() + REPORT_EVERY_S
        except KeyboardInterrupt:
            log.info("flows runner %s: stopped; a batch not yet committed is delivered again", self.query.name)
        self._report()

    def _report(self) -> None:
        """One line of what the runner has done so far and how far behind the source it is (INFO:
        shown with logging at INFO)."""
        st = self.stats
        lag = self.lag()
        pending = "?" if lag["pending"] is None else str(lag["pending"])
        log.info("flows runner %s: %d messages folded, %d windows emitted, %d cycles (%d failed), %d late dropped;"
                 " lag: %s events not yet folded, oldest event of the last pass %.1f s old",
                 self.query.name, st["messages"], st["emitted"], st["cycles"], st["failed_cycles"],
                 st["dropped_late"], pending, lag["behind_s"])

    def lag(self) -> dict[str, Any]:
        """How far behind the source the runner is: `pending`, the source events its consumer group
        has not committed yet, over every partition (one resources call; None when the client cannot
        say), and `behind_s`, the age of the oldest event the last pass popped (0 when it popped none)."""
        pending = None
        resource = getattr(self.client, "resource", None)
        if resource is not None and self.query_id is not None:
            try:
                pending = pending_events(resource(self.query.source), self.group)
            except Exception:  # a progress line never stops the runner
                log.debug("flows runner %s: lag unavailable", self.query.name, exc_info=True)
        return {"pending": pending, "behind_s": self.behind_ms / 1000}

    # ---- one pass ---------------------------------------------------------------------------
    def poll(self, wait_ms: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """Pop up to `partitions` batches (waiting on the first only), grouped by partition id."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for i in range(self.partitions):
            got = self.client.pop(self.query.source, batch=self.batch,
                                  wait_ms=(self.wait_ms if wait_ms is None else wait_ms) if i == 0 else 0,
                                  consumer_group=self.group)
            if not got:
                break
            for m in got:
                groups.setdefault(str(m["partitionId"]), []).append(m)
        return groups

    def run_once(self, wait_ms: int | None = None) -> int:
        """One pop round and one cycle per partition popped; returns the messages folded."""
        if self.query_id is None:
            self.start()
        done = 0
        batches = self._due_tails()
        held_any = bool(self._held)
        polled = self.poll(0 if held_any else wait_ms)
        self._note_behind([*batches.values(), *polled.values()])
        for partition_id, popped in [*batches.items(), *polled.items()]:
            try:
                self.process(partition_id, popped)
                done += len(popped)
            except CycleFailed as failed:
                self._held.pop(partition_id, None)  # the lease is gone: the batch redelivers
                self.stats["failed_cycles"] += 1
                log.warning("flows runner %s: cycle on partition %s failed: %s", self.query.name, partition_id, failed)
            except Exception:
                self._held.pop(partition_id, None)
                self.stats["failed_folds"] += 1
                log.exception("flows runner %s: folding partition %s failed; the batch is nacked",
                              self.query.name, partition_id)
                self._nack(partition_id, popped)
        return done

    def _note_behind(self, batches: list[list[dict[str, Any]]]) -> None:
        created = [to_ms(m["createdAt"]) for popped in batches for m in popped[:1] if m.get("createdAt") is not None]
        self.behind_ms = max(0, int(self.clock() * 1000) - min(created)) if created else 0

    def _nack(self, partition_id: str, popped: list[dict[str, Any]]) -> None:
        """Give a batch that could not be folded back now (a failed delivery, counted against the
        queue's retryLimit) rather than holding its partition until the lease expires."""
        last = popped[-1]
        ack = {"transactionId": str(last["transactionId"]), "leaseId": last.get("leaseId"), "status": "failed"}
        try:
            self._send(partition_id, FoldResult(), ack)
        except Exception:
            log.exception("flows runner %s: nack on partition %s failed; the lease will expire",
                          self.query.name, partition_id)

    def _due_tails(self) -> dict[str, list[dict[str, Any]]]:
        """Gate tails whose retry is due: refused messages still under this runner's lease."""
        now = time.monotonic()
        due = {pid: tail for pid, (at, tail) in self._held.items() if at <= now}
        for pid in due:
            del self._held[pid]
        return due

    def process(self, partition_id: str, popped: list[dict[str, Any]]) -> dict[str, Any]:
        """Fold one partition's batch and commit it in one cycle."""
        q = self.query
        messages = order([Message(str(m["transactionId"]), to_ms(m["createdAt"]), m.get("data", m.get("payload")),
                                  partition_id, m.get("leaseId")) for m in popped])
        records = prepare(q, messages)
        state = self._read(partition_id, keys=needed_keys(q, records))
        if q.window is not None:
            now = stream_time(q, messages, records, state)
            if now is not None:
                ripe = self._read(partition_id, key_prefix=operator_prefix(q.tag),
                                  ripe_at_or_before=now - q.timing.grace_ms)
                state = {**ripe, **state}
        result = fold(q, messages, records, state)
        last = popped[-1]
        ack = {"transactionId": str(last["transactionId"]), "leaseId": last.get("leaseId"),
               "status": "completed", "count": result.ack_count}
        answer = self._commit(partition_id, result, ack)
        if not result.release_lease:  # a gate refused: keep the tail (and its lease) for a retry
            tail = [m for m in popped if str(m["transactionId"]) not in
                    {msg.id for msg in messages[:result.ack_count]}]
            if tail:
                self._held[partition_id] = (time.monotonic() + self.gate_retry_ms / 1000, tail)
        self.stats["messages"] += len(popped)
        self.stats["dropped_late"] += result.dropped_late
        return answer

    def flush_idle(self, *, force: bool = False) -> int:
        """Every `idle_flush_ms` (at once with `force`): emit the windows ripe by this runner's clock
        of every quiet partition holding some, whoever folded them; one guarded `ack: null` cycle per
        partition. A partition that got busy or a row that changed meanwhile is skipped (the fold,
        or the next flush, emits it). Returns the records emitted."""
        q = self.query
        if q.window is None or self.query_id is None:
            return 0
        now = time.monotonic()
        if not force and now - self._flushed_at < q.idle_flush_ms / 1000:
            return 0
        self._flushed_at = now
        prefix = operator_prefix(q.tag)
        ripe_at = int(self.clock() * 1000) - q.timing.grace_ms
        emitted = 0
        for pid in self.client.due(self.query_id, consumer_group=self.group, key_prefix=prefix,
                                   ripe_at_or_before=ripe_at):
            result = flush(q, self._read(pid, key_prefix=prefix, ripe_at_or_before=ripe_at))
            if not result.state_ops:
                continue
            try:
                self._commit(pid, result, None)
                emitted += len(result.emits)
            except CycleFailed as skipped:
                if skipped.code not in ("not_quiet", "state_changed"):
                    raise
                self.stats["flushes_skipped"] += 1
        return emitted

    # ---- plumbing ---------------------------------------------------------------------------
    def _read(self, partition_id: str, **filters: Any) -> dict[str, Any]:
        rows = self.client.get_state(self.query_id, partition_id, **filters)
        return {r["key"]: r["value"] for r in rows}

    def _items(self, partition_id: str, emits: list[Emit]) -> list[dict[str, Any]]:
        q = self.query
        if q.foreach_fn is not None:
            for e in emits:
                q.foreach_fn(e.value)  # before the commit: at-least-once for side effects
            return []
        items = []
        for e in emits:
            part = q.sink_partition(e.value) if callable(q.sink_partition) else q.sink_partition
            tid = str(uuid.uuid5(_IDS, f"{self.query_id}{SEP}{partition_id}{SEP}{e.origin}{SEP}{_digest(e.value)}"))
            items.append({"queue": q.sink_queue, "partition": part, "payload": e.value, "transactionId": tid})
        return items

    def _send(self, partition_id: str, result: FoldResult, ack: dict[str, Any] | None) -> dict[str, Any]:
        """The one place a cycle body is built: a fold's (with its ack), a nack, or an idle flush
        (`ack: None`, sent with `quiet`: it commits only while the partition is quiet)."""
        body = {"query_id": self.query_id, "partition_id": partition_id, "consumer_group": self.group,
                "state_ops": result.state_ops, "push_items": self._items(partition_id, result.emits),
                "ack": ack, "release_lease": result.release_lease}
        if ack is None:
            body["quiet"] = True
        return self.client.cycle(body)

    def _commit(self, partition_id: str, result: FoldResult, ack: dict[str, Any] | None) -> dict[str, Any]:
        answer = self._send(partition_id, result, ack)
        if not answer.get("success"):
            raise CycleFailed(answer.get("error") or "cycle failed", answer.get("code"))
        self.stats["cycles"] += 1
        self.stats["emitted"] += len(result.emits)
        return answer


def pending_events(resource: dict[str, Any] | None, group: str) -> int:
    """Events of a partitioned queue (its resources answer) that `group` has not committed; a
    partition the group never read counts whole (from its start offset)."""
    total = 0
    for part in (resource or {}).get("partitions", []):
        lags = [g["lag"] for g in part.get("consumerGroups", []) if g.get("name") == group]
        total += lags[0] if lags else max(part.get("nextOffset", 0) - part.get("startOffset", 0), 0)
    return total


def _digest(value: Any) -> str:
    """A short digest of a sink payload: two different emissions never share a transaction id."""
    raw = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()
