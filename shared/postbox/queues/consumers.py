"""Consumer dispatch: queues with a `consumer` get their messages delivered to a function in batches.

Each batch is claimed with the consumer's visibility timeout, handed to the function, and acked
(archived or deleted) when the function succeeds. A failure leaves the batch to come back after
the timeout and records `last_error`. At most `concurrency` batches of a queue are in the hands of
its function at once, across every overlapping dispatcher run: each in-flight batch holds one of
the queue's `concurrency` slots, a lease row (`consumer_slots`) with an expiry that single
autocommit statements take and give back. No advisory lock and no session state: RDS Proxy never
pins a dispatcher's session, and the slot of a dispatcher that died frees itself.

Prompt delivery: the send that finds its queue's consumer idle takes the queue's kick
(`consumer_kicks`, in the same SQL call as the send) and starts a dispatch of that one queue
(`start_dispatch`: an asynchronous invoke of the dispatcher on AWS). That dispatch drains the
queue, gives the kick back, and looks once more, so a send that raced with the release is served
too. The schedule's run of every queue only mops up (a failed start, a delayed message).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg

from .. import aws, cells, config, db
from . import consumer_functions, engine

# invoke(tenant_id, function_name, payload): the function gets {"queue": name, "messages": [...]}, and
# the invoker raises on failure. It invokes as the queue's tenant (see `consumer_functions`).
Invoker = Callable[[str, str, dict[str, Any]], None]
logger = logging.getLogger(__name__)

MAX_CONCURRENCY = 10
INVOKE_SHARE = 0.5  # of a run's budget: how long one invoke may take; batches start only while one fits
SLOT_MARGIN_S = 5  # a slot is leased for the batch's visibility timeout plus this
KICK_LEASE_S = 90.0  # a started dispatch that never ran lets the next send start another after this
RELEASE_RECHECK_S = 0.05  # after giving the kick back, look again this much later

_TAKE_SLOT = (
    "INSERT INTO consumer_slots AS s (queue_id, slot, holder, until)"
    " VALUES (%(q)s, %(slot)s, %(me)s, clock_timestamp() + %(lease)s * interval '1 second')"
    " ON CONFLICT (queue_id, slot) DO UPDATE SET holder = excluded.holder, until = excluded.until"
    " WHERE s.until <= clock_timestamp() OR s.holder = excluded.holder RETURNING true"
)
_GIVE_SLOT = "UPDATE consumer_slots SET until = '-infinity' WHERE queue_id = %s AND slot = %s AND holder = %s"
_TAKE_KICK = "SELECT consumer_kick_take(%s, %s)"
_GIVE_KICK = "UPDATE consumer_kicks SET until = '-infinity' WHERE queue_id = %s"
_HAS_VISIBLE = "SELECT EXISTS (SELECT 1 FROM queue_messages WHERE queue_id = %s AND vt <= clock_timestamp())"


class ConsumerQueue(NamedTuple):
    ref: engine.QueueRef
    tenant_id: str
    name: str
    function_name: str
    batch_size: int
    concurrency: int
    visibility_timeout_sec: int | None
    ack: str


def consumer_queues(queue_id: int | None = None) -> list[ConsumerQueue]:
    """Every queue with an enabled consumer (or just `queue_id`, if it has one)."""
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT id, visibility_timeout_sec, max_reads, dead_letter_queue_id, tenant_id::text, name, consumer"
            " FROM queues"
            " WHERE consumer IS NOT NULL AND (consumer->>'enabled')::boolean IS NOT FALSE"
            " AND coalesce(consumer->>'function_name', '') <> '' AND (%s::bigint IS NULL OR id = %s)"
            " ORDER BY id",
            (queue_id, queue_id),
        ).fetchall()
    out = []
    for qid, vt, max_reads, dlq, tenant_id, name, c in rows:
        out.append(ConsumerQueue(
            ref=engine.QueueRef(qid, vt, max_reads, dlq),
            tenant_id=tenant_id,
            name=name,
            function_name=c["function_name"],
            batch_size=int(c.get("batch_size") or 10),
            concurrency=int(c.get("concurrency") or 1),
            visibility_timeout_sec=c.get("visibility_timeout_sec"),
            ack=c.get("ack") or "archive",
        ))
    return out


def _record(conn: psycopg.Connection, queue_id: int, error: str) -> None:
    with conn.transaction():
        conn.execute(
            "UPDATE queues SET consumer_last_error = %s WHERE id = %s AND consumer_last_error <> %s",
            (error[:1000], queue_id, error[:1000]),
        )


def deliver_one_batch(conn: psycopg.Connection, queue: ConsumerQueue, invoke: Invoker) -> int:
    """Claim one batch, invoke, ack on success. Returns how many messages were delivered (0 = none).

    `conn` is in autocommit mode; the claim and the ack are each their own short transaction, so no
    transaction stays open while the function runs. A function that is not the queue's tenant's
    (named before the rule) is never invoked: nothing is claimed and `last_error` says why.
    """
    if consumer_functions.own_name(queue.tenant_id, queue.function_name) is None:
        _record(conn, queue.ref.id, f"{queue.function_name!r} is not one of this tenant's functions"
                                    f" ({consumer_functions.prefix(queue.tenant_id)}<name>): not invoked")
        return 0
    with conn.transaction():
        batch = engine.read(conn, queue.ref, queue.batch_size, queue.visibility_timeout_sec)
    if not batch:
        return 0
    payload = {"queue": queue.name, "messages": [m.as_dict() for m in batch]}
    try:
        invoke(queue.tenant_id, queue.function_name, payload)
    except Exception as exc:  # the function failed: its batch comes back after the timeout
        _record(conn, queue.ref.id, f"{type(exc).__name__}: {exc}")
        return 0
    ids = [m.msg_id for m in batch]
    with conn.transaction():
        (engine.archive if queue.ack == "archive" else engine.delete)(conn, queue.ref.id, ids)
    _record(conn, queue.ref.id, "")
    return len(batch)


def _lease_s(queue: ConsumerQueue) -> float:
    return float(queue.visibility_timeout_sec or queue.ref.visibility_timeout_sec or 30) + SLOT_MARGIN_S


def invoke_timeout_s(budget_s: float) -> float:
    """The longest one invoke of a run with this budget may take (the invoker's bound): a batch starts
    only while that much of the budget is left, so every invoke ends within the run, and a function
    that never answers cannot outlast the dispatcher and take other tenants' acks down with it."""
    return max(1.0, budget_s * INVOKE_SHARE)


def _serve_slot(queue: ConsumerQueue, slot: int, invoke: Invoker, deadline: float, invoke_s: float) -> int:
    """Hold one of the queue's slots (if free) and deliver batches until empty, failing or out of time
    (a batch starts only while an invoke of `invoke_s` ends before `deadline`).

    The slot's lease is renewed before each batch; a batch whose function outlives it may overlap
    with another slot's, as its messages would come back after their visibility timeout anyway."""
    me = uuid.uuid4()
    args = {"q": queue.ref.id, "slot": slot, "me": me, "lease": _lease_s(queue)}
    delivered = 0
    with db.connection() as conn:
        try:
            while time.monotonic() + invoke_s <= deadline:
                if not conn.execute(_TAKE_SLOT, args).fetchone():
                    break  # another dispatcher holds it
                n = deliver_one_batch(conn, queue, invoke)
                if n == 0:
                    break
                delivered += n
        finally:
            conn.execute(_GIVE_SLOT, (queue.ref.id, slot, me))
    return delivered


Task = tuple[ConsumerQueue, int]  # a queue and one of its slots


def _next_task(waiting: dict[str, deque[Task]], running: dict[str, int], turn: deque[str]) -> Task | None:
    """The next slot to serve: of the tenants with slots waiting, the one serving fewest now (ties in
    turn), so one tenant's slow functions hold at most its share of the workers while others wait."""
    ready = [tenant for tenant in turn if waiting[tenant]]
    if not ready:
        return None
    tenant = min(ready, key=lambda t: running[t])
    turn.remove(tenant)
    turn.append(tenant)
    running[tenant] += 1
    return waiting[tenant].popleft()


def _serve(queues: list[ConsumerQueue], invoke: Invoker, deadline: float, workers: int | None,
           invoke_s: float) -> int:
    """Serve every slot of `queues` on at most `workers` threads; a slot holds its thread until its
    queue is empty or the run's time is up, so slots are handed out fairly over the tenants."""
    waiting: dict[str, deque[Task]] = {}
    for q in queues:
        waiting.setdefault(q.tenant_id, deque()).extend((q, slot) for slot in range(min(q.concurrency,
                                                                                          MAX_CONCURRENCY)))
    size = sum(len(tasks) for tasks in waiting.values())
    if not size:
        return 0
    running, turn = dict.fromkeys(waiting, 0), deque(waiting)
    workers = min(workers or max(1, config.settings().pool_max), size)
    cell = cells.current()  # the pool's threads serve the cell this run is on

    def serve(task: Task) -> int:
        with cells.use(cell):
            return _serve_slot(task[0], task[1], invoke, deadline, invoke_s)

    # the dispatcher's alone: a send never needs them
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    delivered = 0
    serving: dict[Future, str] = {}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="consumer") as pool:
        while True:
            while len(serving) < workers and (task := _next_task(waiting, running, turn)) is not None:
                serving[pool.submit(serve, task)] = task[0].tenant_id
            if not serving:
                return delivered
            done, _ = wait(list(serving), return_when=FIRST_COMPLETED)
            for future in done:
                running[serving.pop(future)] -= 1
                delivered += future.result()


def dispatch(invoke: Invoker, budget_s: float = 40.0, workers: int | None = None) -> int:
    """One dispatcher run over every queue with an enabled consumer; returns messages delivered.

    Slots are served by at most `workers` threads (the pool's size by default), each holding one
    connection, so the run never waits on its own pool. `invoke` must give up on a function after
    `invoke_timeout_s(budget_s)` (`functions.agents.consumer_invokers` does).
    """
    return _serve(consumer_queues(), invoke, time.monotonic() + budget_s, workers, invoke_timeout_s(budget_s))


def dispatch_queue(queue_id: int, invoke: Invoker, budget_s: float = 40.0, workers: int | None = None) -> int:
    """The dispatch a send started: drain one queue, give its kick back, and look once more.

    Messages still waiting after the release (the budget ran out, or a send committed while the
    kick was being given back) start the next dispatch at once, unless someone else took the kick."""
    deadline = time.monotonic() + budget_s
    queues = consumer_queues(queue_id)
    delivered = _serve(queues, invoke, deadline, workers, invoke_timeout_s(budget_s))
    with db.connection() as conn:
        conn.execute(_GIVE_KICK, (queue_id,))
        if not queues:
            return delivered
        time.sleep(RELEASE_RECHECK_S)
        if conn.execute(_HAS_VISIBLE, (queue_id,)).fetchone()[0] and conn.execute(
            _TAKE_KICK, (queue_id, KICK_LEASE_S)
        ).fetchone()[0]:
            start_dispatch(queue_id)
    return delivered


# ---- starting a dispatch --------------------------------------------------------------------------

Starter = Callable[[int], None]
_starter: Starter | None = None


def set_starter(starter: Starter | None) -> None:
    """How `start_dispatch` starts one: the local runtime and tests set their own."""
    global _starter
    _starter = starter


def lambda_starter(function_name: str, client: Any = None) -> Starter:
    """An asynchronous invoke of the consumer-dispatch function for one queue (answers at once)."""

    def start(queue_id: int) -> None:
        nonlocal client
        if client is None:
            client = aws.client("lambda")  # only a send that starts a dispatch pays for it
        client.invoke(
            FunctionName=function_name,
            InvocationType="Event",
            Payload=json.dumps({"queue_id": queue_id, "cell": cells.current().name}).encode(),  # an id of that cell
        )

    return start


def start_dispatch(queue_id: int) -> None:
    """Start a dispatch of `queue_id` (its kick is taken). Never fails the caller: a dispatch that
    does not start is the schedule's to mop up, and the kick frees itself after KICK_LEASE_S."""
    global _starter
    if _starter is None:
        function_name = config.settings().consumer_dispatch_function
        if not function_name:
            return
        _starter = lambda_starter(function_name)
    try:
        _starter(queue_id)
    except Exception as error:  # noqa: BLE001 - the send succeeded; delivery falls back to the schedule
        logger.warning("consumer dispatch did not start", extra={"queue_id": queue_id, "error": repr(error)})


def oldest_waiting_age_s() -> float:
    """Seconds the oldest visible message of any queue with an enabled consumer has waited (0 if
    none): the back-pressure the dispatcher reports and the stack alarms on."""
    with db.connection() as conn:
        return float(conn.execute(
            "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - m.oldest)), 0) FROM queues q"
            " CROSS JOIN LATERAL (SELECT enqueued_at AS oldest FROM queue_messages"
            " WHERE queue_id = q.id AND vt <= clock_timestamp() ORDER BY msg_id LIMIT 1) m"
            " WHERE q.consumer IS NOT NULL AND (q.consumer->>'enabled')::boolean IS NOT FALSE"
        ).fetchone()[0])
