"""Push delivery of subscriptions: the agent claims a push subscription's deliveries (as a pull
would, within max_in_flight) and POSTs each to the subscription's `push_url`, signed.

A 2xx answer within TIMEOUT_S (one deadline for the whole call: resolving, connecting, sending and
the answer) completes the delivery; anything else (another status, a timeout, a refused
connection, a redirect, a URL or an answer that is not HTTP, an address that is not public) fails
it, so it comes back after the delivery backoff and is dead-lettered after the message's
max_retries. Every call goes through `postbox.outbound`, whose rules say which addresses a push
may reach. Signature: the header
`X-Scaiqueue-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.

One endpoint stalls nobody else: a run lists its SUBSCRIPTIONS_PER_RUN due subscriptions by turns
over the tenants (`work_push_due`), posts run on PARALLEL threads, handed out round robin over the
tenants, and a tenant holds at most PER_TENANT of them at once, so another tenant's delivery never
waits behind a slow endpoint longer than one call's deadline.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .. import db, jsoncodec, outbound

TIMEOUT_S = 10.0
CLAIM_S = 60  # a claimed delivery's hold while it is being posted
SUBSCRIPTIONS_PER_RUN = 100
PARALLEL = 16
PER_TENANT = 4  # the most posts one tenant has in the air at once: PARALLEL - PER_TENANT stay for others
ACTOR = ("system", "work-push-delivery")  # who the audit log names for what the agent does
log = logging.getLogger(__name__)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Scaiqueue-Signature value a receiver recomputes to check a delivery."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def post(url: str, secret: str, delivery: dict[str, Any]) -> str | None:
    """POST one delivery; None when it was accepted (2xx), else why not. Never raises."""
    try:
        body = jsoncodec.dumps({k: v for k, v in delivery.items() if k != "claim_token"})
        headers = {"Content-Type": "application/json", "User-Agent": "postbox-work-push",
                   "X-Scaiqueue-Signature": signature(secret, int(time.time()), body),
                   "X-Scaiqueue-Delivery": f"{delivery['subscription_id']}/{delivery['id']}/{delivery['attempts']}"}
        answer = outbound.post(url, body, headers, TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - a delivery that cannot even be built is that delivery's failure
        return f"push: {type(e).__name__}: {e}"[:500]
    return None if answer.ok else f"push: {answer.failure}"[:500]


@dataclass(eq=False)
class _Sub:
    id: str
    tenant_id: str
    scope_id: str
    url: str
    secret: str
    left: int  # what this run may still claim of it: its max_in_flight, as one claim did before


@dataclass(eq=False)
class _Tenant:
    """One tenant's share of a run: its due subscriptions, then the deliveries claimed for them."""

    subs: deque[_Sub]
    ready: deque[tuple[_Sub, dict[str, Any]]] = field(default_factory=deque)
    posting: int = 0


def _claim(conn: psycopg.Connection, sub: _Sub, n: int) -> list[dict[str, Any]]:
    try:
        return conn.execute("SELECT work_subscription_claim(%s, %s, %s, %s, %s, NULL, %s, %s)",
                            (sub.tenant_id, sub.scope_id, sub.id, n, CLAIM_S, *ACTOR)).fetchone()[0]
    except psycopg.Error as e:
        if not (e.sqlstate or "").startswith("PB"):
            raise
        log.warning("push: no claim for subscription %s: %s", sub.id, e)  # e.g. deleted since it was due
        return []


def _finish(conn: psycopg.Connection, sub: _Sub, delivery: dict[str, Any], failure: str | None,
            action: str | None = None) -> None:
    item = {"id": delivery["id"], "claim_token": delivery["claim_token"]}
    action = action or ("complete" if failure is None else "fail")
    doc = ({**item, "response": {"pushed": True}} if action == "complete"
           else {**item, "reason": failure} if action == "fail" else item)
    try:
        conn.execute("SELECT work_subscription_finish(%s, %s, %s, %s, %s::jsonb, %s, %s)",
                     (sub.tenant_id, sub.scope_id, sub.id, action, jsoncodec.dumps(doc).decode(), *ACTOR))
    except psycopg.Error as e:
        if action == "complete" and e.sqlstate == "PB422":  # a reviewed message: a push is no decision
            _finish(conn, sub, delivery, "push: accepted, but a reviewed message needs a decision response")
        elif (e.sqlstate or "").startswith("PB"):  # PB409: the claim moved on (it comes back later); PB404: gone
            if e.sqlstate != "PB409":
                log.warning("push: delivery %s of subscription %s not finished: %s", delivery["id"], sub.id, e)
        else:
            raise


def _due() -> deque[_Tenant]:
    """The tenants with due push subscriptions, in the order of their oldest one."""
    with db.connection() as conn:
        rows = conn.execute("SELECT * FROM work_push_due(%s)", (SUBSCRIPTIONS_PER_RUN,)).fetchall()
    tenants: dict[str, _Tenant] = {}
    for sub_id, tenant_id, scope_id, url, secret, in_flight in rows:
        sub = _Sub(str(sub_id), str(tenant_id), str(scope_id), url, secret, max(0, in_flight))
        tenants.setdefault(sub.tenant_id, _Tenant(deque())).subs.append(sub)
    return deque(tenants.values())


def _next_for(conn: psycopg.Connection, tenant: _Tenant) -> tuple[_Sub, dict[str, Any]] | None:
    """The tenant's next delivery to post, claiming when none is ready: PER_TENANT at a time, from
    its subscriptions in turn. A claim is made only when one of them can start at once and the rest
    start as the tenant's own posts end, so each is posted well within CLAIM_S of its claim."""
    while not tenant.ready and tenant.subs:
        sub = tenant.subs.popleft()
        n = min(PER_TENANT, sub.left)
        claimed = _claim(conn, sub, n)
        sub.left -= len(claimed)
        tenant.ready.extend((sub, d) for d in claimed)
        if len(claimed) == n and sub.left > 0:
            tenant.subs.append(sub)  # it may hold more
    return tenant.ready.popleft() if tenant.ready else None


Posting = dict[Future, tuple[_Tenant, _Sub, dict[str, Any]]]


def _start_what_fits(conn: psycopg.Connection, pool: ThreadPoolExecutor, rotation: deque[_Tenant],
                     posting: Posting, deadline: float) -> None:
    """Round robin: each pass lets every tenant with room (under PER_TENANT) start one post, until
    the pool is full; a tenant with nothing left to post leaves the rotation."""
    while len(posting) < PARALLEL and time.monotonic() <= deadline:
        started = False
        for _ in range(len(rotation)):
            if len(posting) >= PARALLEL:
                return
            tenant = rotation[0]
            rotation.rotate(-1)
            job = _next_for(conn, tenant) if tenant.posting < PER_TENANT else None
            if job is not None:
                sub, delivery = job
                tenant.posting += 1
                posting[pool.submit(post, sub.url, sub.secret, delivery)] = (tenant, sub, delivery)
                started = True
            elif not tenant.posting and not tenant.ready and not tenant.subs:
                rotation.pop()  # just rotated to the end
        if not started:
            return


def deliver(budget_s: float = 45.0) -> int:
    """Post what every due push subscription holds, until done or the budget is spent (posts started
    by then end within TIMEOUT_S). The calling thread claims and finishes, on one connection; the
    pool only posts. Deliveries claimed but not started in time are released (no attempt spent)."""
    deadline, posted = time.monotonic() + budget_s, 0
    rotation = _due()
    tenants = list(rotation)
    posting: Posting = {}
    with db.connection() as conn, ThreadPoolExecutor(PARALLEL, thread_name_prefix="work-push") as pool:
        _start_what_fits(conn, pool, rotation, posting, deadline)
        while posting:
            done, _ = wait(list(posting), return_when=FIRST_COMPLETED)
            for future in done:
                tenant, sub, delivery = posting.pop(future)
                tenant.posting -= 1
                _finish(conn, sub, delivery, future.result())
                posted += 1
            _start_what_fits(conn, pool, rotation, posting, deadline)
        for tenant in tenants:
            for sub, delivery in tenant.ready:
                _finish(conn, sub, delivery, None, action="release")
    return posted
