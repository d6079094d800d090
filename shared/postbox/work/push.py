"""Push delivery of subscriptions: the agent claims a push subscription's deliveries (as a pull
would, within max_in_flight) and POSTs each to the subscription's `push_url`, signed.

A 2xx answer within TIMEOUT_S completes the delivery; anything else (another status, a timeout,
a refused connection, a redirect) fails it, so it comes back after the delivery backoff and is
dead-lettered after the message's max_retries. Signature: the header
`X-Scaiqueue-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
Addresses that resolve to private, loopback or link-local networks are refused unless
POSTBOX_WORK_PUSH_ALLOW_PRIVATE is set (local development).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from .. import config, db, jsoncodec

TIMEOUT_S = 10
CLAIM_S = 60  # a claimed delivery's hold while it is being posted
SUBSCRIPTIONS_PER_RUN = 100
PARALLEL = 8
ACTOR = ("system", "work-push-delivery")  # who the audit log names for what the agent does


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Scaiqueue-Signature value a receiver recomputes to check a delivery."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an answer that is not 2xx


_opener = urllib.request.build_opener(_NoRedirects)


def _private_refused(url: str) -> str | None:
    if config.settings().work_push_allow_private:
        return None
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError as e:
        return f"push: cannot resolve {host}: {e}"
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast:
            return f"push: {host} resolves to a private address"
    return None


def post(url: str, secret: str, delivery: dict[str, Any]) -> str | None:
    """POST one delivery; None when it was accepted (2xx), else why not."""
    refused = _private_refused(url)
    if refused:
        return refused
    body = jsoncodec.dumps({k: v for k, v in delivery.items() if k != "claim_token"})
    headers = {"Content-Type": "application/json", "User-Agent": "postbox-work-push",
               "X-Scaiqueue-Signature": signature(secret, int(time.time()), body),
               "X-Scaiqueue-Delivery": f"{delivery['subscription_id']}/{delivery['id']}/{delivery['attempts']}"}
    try:
        with _opener.open(urllib.request.Request(url, data=body, headers=headers, method="POST"),
                          timeout=TIMEOUT_S) as answer:
            status = answer.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (OSError, ValueError) as e:
        return f"push: {type(e).__name__}: {e}"[:500]
    return None if 200 <= status < 300 else f"push: HTTP {status}"


def _finish(conn: psycopg.Connection, sub: tuple, delivery: dict[str, Any], failure: str | None) -> None:
    sub_id, tenant_id, scope_id = sub[0], sub[1], sub[2]
    item = {"id": delivery["id"], "claim_token": delivery["claim_token"]}
    action = "complete" if failure is None else "fail"
    try:
        conn.execute("SELECT work_subscription_finish(%s, %s, %s, %s, %s::jsonb, %s, %s)",
                     (tenant_id, scope_id, sub_id, action,
                      jsoncodec.dumps({**item, "response": {"pushed": True}} if failure is None
                                      else {**item, "reason": failure}).decode(), *ACTOR))
    except psycopg.Error as e:
        if failure is None and e.sqlstate == "PB422":  # a reviewed message: a push is no decision
            _finish(conn, sub, delivery, "push: accepted, but a reviewed message needs a decision response")
        elif e.sqlstate != "PB409":  # PB409: the claim moved on (it ran out); it comes back later
            raise


def deliver(budget_s: float = 45.0) -> int:
    """Post what every due push subscription holds, until done or the budget is spent."""
    deadline, posted = time.monotonic() + budget_s, 0
    with db.connection() as conn:
        due = conn.execute("SELECT * FROM work_push_due(%s)", (SUBSCRIPTIONS_PER_RUN,)).fetchall()
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="work-push") as pool:
        for sub in due:
            if time.monotonic() > deadline:
                break
            sub_id, tenant_id, scope_id, url, secret, in_flight = sub
            with db.connection() as conn:
                claimed = conn.execute("SELECT work_subscription_claim(%s, %s, %s, %s, %s, NULL, %s, %s)",
                                       (tenant_id, scope_id, sub_id, in_flight, CLAIM_S, *ACTOR)).fetchone()[0]
            failures = list(pool.map(lambda d, u=url, k=secret: post(u, k, d), claimed))
            with db.connection() as conn:
                for delivery, failure in zip(claimed, failures, strict=True):
                    _finish(conn, sub, delivery, failure)
            posted += len(claimed)
    return posted
