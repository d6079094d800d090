"""Push delivery of subscriptions: signed POSTs to a local receiver, 2xx completes, anything else
retries with backoff and dead-letters after the last attempt; private addresses are refused."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from postbox import config, db
from postbox.errors import Unprocessable
from postbox.work import browse, messages, push, queues, scopes, subscriptions
from support.clock import wait_for_db_clock


class Receiver:
    """A local HTTP endpoint answering with the statuses queued in `answers` (200 once they run out)."""

    def __init__(self) -> None:
        self.got: list[tuple[dict, dict]] = []
        self.answers: list[int] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append((dict(self.headers), {"raw": body, **json.loads(body)}))
                self.send_response(outer.answers.pop(0) if outer.answers else 200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver(monkeypatch):
    monkeypatch.setenv("POSTBOX_WORK_PUSH_ALLOW_PRIVATE", "1")
    config.reset()
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def feed(tenant):
    s = scopes.create_scope(tenant.principal, {"slug": "hooks"})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "feed", "consumer_mode": "broadcast"})
    return s, q


def _push_sub(tenant, s, q, url, **fields):
    return subscriptions.create(tenant.principal, s["id"], {"subscriber_type": "service", "subscriber_id": "hook",
                                                           "queue_id": q["id"], "delivery_mode": "push",
                                                           "push_url": url, **fields})


def _delivery(tenant, s, sub, message_id):
    with db.connection() as conn:
        return conn.execute("SELECT doc FROM work_delivery_docs WHERE subscription_id = %s AND message_id = %s",
                            (sub["id"], message_id)).fetchone()[0]


def test_signed_push_completes_on_2xx(tenant, feed, receiver):
    s, q = feed
    sub = _push_sub(tenant, s, q, receiver.url)
    assert sub["push_secret"].startswith("whsec_") and sub["push_url"] == receiver.url
    assert "push_secret" not in subscriptions.get(tenant.principal, s["id"], sub["id"])
    m = messages.publish(tenant.principal, s["id"], q["id"], {"body": {"hello": 1}, "correlation_id": "c"})[0]
    assert push.deliver() == 1
    [(headers, body)] = receiver.got
    assert body["id"] == m["id"] and body["body"] == {"hello": 1} and "claim_token" not in body
    t = headers["X-Scaiqueue-Signature"].split(",")[0][2:]
    expected = hmac.new(sub["push_secret"].encode(), f"{t}.".encode() + body["raw"], hashlib.sha256).hexdigest()
    assert headers["X-Scaiqueue-Signature"] == f"t={t},v1={expected}"
    assert _delivery(tenant, s, sub, m["id"])["state"] == "completed"
    assert subscriptions.processed(tenant.principal, sub["id"], [m["id"]]) == {m["id"]: True}
    assert push.deliver() == 0  # nothing left


def test_failed_pushes_retry_with_backoff_then_dead_letter(tenant, feed, receiver):
    s, q = feed
    sub = _push_sub(tenant, s, q, receiver.url)
    m = messages.publish(tenant.principal, s["id"], q["id"], {"body": "x", "max_retries": 2})[0]
    receiver.answers = [503, 500]
    assert push.deliver() == 1
    first = _delivery(tenant, s, sub, m["id"])
    assert first["state"] == "pending" and first["failure_reason"] == "push: HTTP 503" and first["attempts"] == 1
    assert push.deliver() == 0  # backing off: not visible yet
    wait_for_db_clock(datetime.fromisoformat(first["visible_at"]))
    assert push.deliver() == 1
    last = _delivery(tenant, s, sub, m["id"])
    assert last["state"] == "dead_lettered" and last["failure_reason"] == "push: HTTP 500"
    assert len(receiver.got) == 2


def test_private_addresses_are_refused_without_the_switch(tenant, feed, receiver, monkeypatch):
    s, q = feed
    sub = _push_sub(tenant, s, q, receiver.url)
    monkeypatch.delenv("POSTBOX_WORK_PUSH_ALLOW_PRIVATE")
    config.reset()
    m = messages.publish(tenant.principal, s["id"], q["id"], {"body": "x"})[0]
    push.deliver()
    assert receiver.got == []
    assert "not a public address" in _delivery(tenant, s, sub, m["id"])["failure_reason"]


def test_push_needs_a_url_and_switching_makes_a_secret(tenant, feed):
    s, q = feed
    with pytest.raises(Unprocessable) as e:
        subscriptions.create(tenant.principal, s["id"], {"subscriber_type": "agent", "subscriber_id": "a",
                                                         "queue_id": q["id"], "delivery_mode": "push"})
    assert e.value.details["fields"][0]["field"] == "push_url"
    pull = subscriptions.create(tenant.principal, s["id"], {"subscriber_type": "agent", "subscriber_id": "a",
                                                            "queue_id": q["id"]})
    with pytest.raises(Unprocessable):
        subscriptions.update(tenant.principal, s["id"], pull["id"], {"delivery_mode": "push"})
    switched = subscriptions.update(tenant.principal, s["id"], pull["id"],
                                    {"delivery_mode": "push", "push_url": "https://example.com/hook"})
    assert switched["push_secret"].startswith("whsec_")
    again = subscriptions.update(tenant.principal, s["id"], pull["id"], {"max_in_flight": 3})
    assert "push_secret" not in again


def test_a_push_subscription_on_a_competing_queue_gets_what_its_filter_lets_through(tenant, receiver):
    s = scopes.create_scope(tenant.principal, {"slug": "hooks-competing"})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})
    sub = _push_sub(tenant, s, q, receiver.url, filter={"field": "type", "op": "eq", "value": "hook"})
    hook = messages.publish(tenant.principal, s["id"], q["id"], {"body": "h", "type": "hook"})[0]
    other = messages.publish(tenant.principal, s["id"], q["id"], {"body": "o", "type": "other"})[0]
    assert push.deliver() == 1
    [(headers, body)] = receiver.got
    assert body["id"] == hook["id"] and body["subscription_id"] == sub["id"] and "claim_token" not in body
    assert headers["X-Scaiqueue-Delivery"] == f"{sub['id']}/{hook['id']}/1"
    assert browse.get_message(tenant.principal, s["id"], q["id"], hook["id"])["state"] == "completed"
    assert browse.get_message(tenant.principal, s["id"], q["id"], other["id"])["state"] == "pending"
    assert subscriptions.processed(tenant.principal, sub["id"], [hook["id"], other["id"]]) == {
        hook["id"]: True, other["id"]: False}
    receiver.answers = [500]
    failed = messages.publish(tenant.principal, s["id"], q["id"], {"body": "f", "type": "hook"})[0]
    assert push.deliver() == 1
    back = browse.get_message(tenant.principal, s["id"], q["id"], failed["id"])
    assert back["state"] == "pending" and back["failure_reason"] == "push: HTTP 500" and back["attempts"] == 1
    subscriptions.delete(tenant.principal, s["id"], sub["id"])  # its pending work is no later test's
    assert browse.get_message(tenant.principal, s["id"], q["id"], failed["id"])["state"] == "pending"
