"""Push delivery against endpoints that misbehave: one bad endpoint fails only its own delivery
(recorded, retried with backoff), never the agent's run for everyone; one deadline covers a whole
call; a trickling endpoint of one tenant does not hold another tenant's delivery; a name is
resolved once and the connection goes to the address that was checked; every address that is not
public is refused."""

from __future__ import annotations

import threading
import time

import pytest

from postbox import config, db
from postbox.errors import Unprocessable
from postbox.work import messages, push, queues, scopes, subscriptions
from support import endpoints
from support.endpoints import Endpoint, Network

GOOD = endpoints.status(200)


@pytest.fixture
def loopback_allowed(monkeypatch):
    """The operator's switch the local runtime and tests use to reach 127.0.0.1."""
    monkeypatch.setenv("POSTBOX_WORK_PUSH_ALLOW_PRIVATE", "1")
    config.reset()


@pytest.fixture
def served():
    """Endpoints made by the test, closed after it."""
    made: list[Endpoint] = []

    def serve(answer, **kwargs) -> Endpoint:
        made.append(Endpoint(answer, **kwargs))
        return made[-1]

    yield serve
    for endpoint in made:
        endpoint.close()


@pytest.fixture
def hooked(make_tenant):
    """A tenant with a broadcast queue and a push subscription to `url`; its subscriptions are
    dropped after the test, so no later run of the agent posts for it."""
    made: list[str] = []

    def hook(url: str, messages_n: int = 1):
        tenant = make_tenant()
        s = scopes.create_scope(tenant.principal, {"slug": "hooks"})
        made.append(str(s["id"]))
        q = queues.create_queue(tenant.principal, s["id"], {"slug": "feed", "consumer_mode": "broadcast"})
        sub = subscriptions.create(tenant.principal, s["id"], {
            "subscriber_type": "service", "subscriber_id": "hook", "queue_id": q["id"], "delivery_mode": "push",
            "push_url": url})
        ids = [messages.publish(tenant.principal, s["id"], q["id"], {"body": {"n": i}, "max_retries": 5})[0]["id"]
               for i in range(messages_n)]
        return sub, ids

    yield hook
    with db.connection() as conn:
        conn.execute("DELETE FROM work_subscriptions WHERE scope_id = ANY(%s::uuid[])", (made,))


def _deliveries(sub) -> dict[str, dict]:
    with db.connection() as conn:
        rows = conn.execute("SELECT message_id::text, doc FROM work_delivery_docs WHERE subscription_id = %s",
                            (sub["id"],)).fetchall()
    return dict(rows)


def _set_url(sub, url: str) -> None:
    """A URL stored before today's checks (the API refuses it now)."""
    with db.connection() as conn:
        conn.execute("UPDATE work_subscriptions SET push_url = %s WHERE id = %s", (url, sub["id"]))


# ---- one bad endpoint fails only its own delivery ---------------------------------------------------


BAD_ANSWERS = {
    "bad status line": endpoints.raw(b"HELLO THERE\r\n\r\n"),
    "bad status code": endpoints.raw(b"HTTP/1.1 2OO OK\r\n\r\n"),
    "garbage": endpoints.raw(bytes(range(1, 256)).replace(b"\n", b"") * 400),
    "endless head": endpoints.endless(b"HTTP/1.1 200 OK\r\n", b"X-More: yes\r\n"),
    "endless status line": endpoints.endless(b"HTTP/1.1 200 ", b"O" * 1024),
}


@pytest.mark.parametrize("bad", list(BAD_ANSWERS))
def test_a_bad_answer_fails_its_delivery_and_no_other(bad, loopback_allowed, served, hooked):
    broken = served(BAD_ANSWERS[bad])
    good = served(GOOD)
    bad_sub, [bad_id] = hooked(broken.url)  # the older subscription: posted first
    good_sub, [good_id] = hooked(good.url)
    push.deliver(budget_s=10)
    assert _deliveries(good_sub)[good_id]["state"] == "completed"
    failed = _deliveries(bad_sub)[bad_id]
    assert failed["state"] == "pending" and failed["attempts"] == 1, failed
    assert failed["failure_reason"].startswith("push: "), failed


@pytest.mark.parametrize("url", ["http://127.0.0.1:abc/hook", "http://127.0.0.1:99999/hook", "http://[::1/hook",
                                 "http://127.0.0.1:0/hook", "gopher://127.0.0.1/", "http:///hook"])
def test_a_stored_url_that_is_no_url_fails_its_delivery_and_no_other(url, loopback_allowed, served, hooked):
    good = served(GOOD)
    bad_sub, [bad_id] = hooked(good.url)
    _set_url(bad_sub, url)
    good_sub, [good_id] = hooked(good.url)
    push.deliver(budget_s=10)
    assert _deliveries(good_sub)[good_id]["state"] == "completed"
    failed = _deliveries(bad_sub)[bad_id]
    assert failed["state"] == "pending" and failed["failure_reason"].startswith("push: refused: "), failed
    assert len(good.got) == 1


@pytest.mark.parametrize("url", ["http://127.0.0.1:abc/hook", "http://example.com:99999/", "http://example.com:0/",
                                 "ftp://example.com/", "http://user:secret@example.com/", "http://exa mple.com/",
                                 "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/",
                                 "http://100.64.0.1/", "http://10.0.0.1/", "http://[::ffff:127.0.0.1]/"])
def test_a_url_no_push_may_use_is_refused_when_it_is_stored(url, tenant):
    s = scopes.create_scope(tenant.principal, {"slug": "hooks"})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "feed", "consumer_mode": "broadcast"})
    with pytest.raises(Unprocessable) as e:
        subscriptions.create(tenant.principal, s["id"], {"subscriber_type": "service", "subscriber_id": "hook",
                                                         "queue_id": q["id"], "delivery_mode": "push",
                                                         "push_url": url})
    assert e.value.details["fields"][0]["field"] == "push_url"


# ---- one deadline per call; a slow endpoint holds no one else ---------------------------------------


def test_a_trickling_endpoint_holds_neither_the_agent_nor_another_tenant(loopback_allowed, served, hooked,
                                                                         monkeypatch):
    monkeypatch.setattr(push, "TIMEOUT_S", 3.0)
    slow = served(endpoints.trickle(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"z" * 64))
    good = served(GOOD)
    slow_sub, slow_ids = hooked(slow.url, messages_n=6)  # posted first, and more than one tenant's share
    good_sub, [good_id] = hooked(good.url)
    started = time.monotonic()
    run = threading.Thread(target=push.deliver, kwargs={"budget_s": 1.0}, daemon=True)
    run.start()
    assert good.arrived.wait(5.0), "the good endpoint waited behind the trickling one"
    good_after_s = time.monotonic() - started
    run.join(30.0)
    assert not run.is_alive(), "the trickling endpoint held the run"
    run_s = time.monotonic() - started
    print(f"good endpoint reached after {good_after_s:.2f} s; the run took {run_s:.2f} s")
    assert _deliveries(good_sub)[good_id]["state"] == "completed"
    slow_now = _deliveries(slow_sub)
    failed = [slow_now[i] for i in slow_ids if slow_now[i]["attempts"] == 1]
    assert len(failed) == push.PER_TENANT  # one wave started in the budget; the rest were never claimed
    assert all(d["state"] == "pending" and d["failure_reason"] == "push: no answer within 3 s" for d in failed)
    assert all(slow_now[i]["attempts"] == 0 for i in slow_ids if slow_now[i] not in failed)


def test_one_tenants_many_due_subscriptions_leave_room_for_another_tenant(loopback_allowed, served, hooked,
                                                                          make_tenant, monkeypatch):
    """A run lists at most SUBSCRIPTIONS_PER_RUN due subscriptions, by turns over the tenants: one
    tenant with that many, all older and always due, does not keep another's out of every run."""
    monkeypatch.setattr(push, "SUBSCRIPTIONS_PER_RUN", 3)
    good = served(GOOD)
    hog = make_tenant()
    s = scopes.create_scope(hog.principal, {"slug": "hooks"})
    q = queues.create_queue(hog.principal, s["id"], {"slug": "feed", "consumer_mode": "broadcast"})
    try:
        for n in range(3):
            subscriptions.create(hog.principal, s["id"], {
                "subscriber_type": "service", "subscriber_id": f"hook-{n}", "queue_id": q["id"],
                "delivery_mode": "push", "push_url": good.url})
        messages.publish(hog.principal, s["id"], q["id"], {"body": {"n": 0}})
        other_sub, [other_id] = hooked(good.url)
        push.deliver(budget_s=10)
        assert _deliveries(other_sub)[other_id]["state"] == "completed"
    finally:
        with db.connection() as conn:
            conn.execute("DELETE FROM work_subscriptions WHERE scope_id = %s", (s["id"],))


def test_a_lookup_that_never_ends_is_held_to_the_deadline(monkeypatch):
    never = threading.Event()

    def hanging(*args, **kwargs):
        never.wait(30)
        raise OSError("gave up")

    monkeypatch.setattr("socket.getaddrinfo", hanging)
    monkeypatch.setattr(push, "TIMEOUT_S", 1.0)
    started = time.monotonic()
    failure = push.post("http://hangs.example/hook", "s", {"subscription_id": "x", "id": "y", "attempts": 1})
    never.set()
    assert failure == "push: no answer within 1 s" and time.monotonic() - started < 5


# ---- the address checked is the address connected to ------------------------------------------------


def _one_delivery() -> dict:
    return {"subscription_id": "00000000-0000-0000-0000-000000000001", "id": "m", "attempts": 1, "claim_token": "t"}


def test_dns_rebinding_cannot_move_the_connection(served, monkeypatch):
    receiver = served(GOOD)  # on loopback: where the second lookup would send the call
    net = Network({"rebind.example": ["93.184.216.34", "127.0.0.1"]}).install(monkeypatch)
    failure = push.post(f"http://rebind.example:{receiver.port}/hook", "s", _one_delivery())
    assert net.connects == ["93.184.216.34"], net.connects  # the address that was checked
    assert receiver.got == [] and "ConnectionRefusedError" in failure
    assert net.lookups["rebind.example"] == 1


NOT_PUBLIC = [
    "127.0.0.1", "127.1.2.3", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "100.127.255.254",
    "169.254.169.254", "169.254.1.1", "0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "255.255.255.255",
    "240.0.0.1", "198.18.0.1", "192.0.0.8", "192.0.2.1", "198.51.100.7", "203.0.113.9",
    "::1", "::", "fe80::1", "fc00::1", "fd00:ec2::254", "fd12:3456::1", "ff02::1", "ff0e::1", "fec0::1",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "::ffff:100.64.0.1", "::7f00:1",
    "::a9fe:a9fe", "2002:a9fe:a9fe::1", "2002:7f00:1::1", "2002:a00:1::", "2002:6440:1::1",
    "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::6440:1", "64:ff9b:1::a00:1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:db8::1", "100::1",
]
NEVER_EVEN_LOCALLY = ["169.254.169.254", "169.254.1.1", "fd00:ec2::254", "fe80::1", "::ffff:169.254.169.254",
                      "2002:a9fe:a9fe::1", "64:ff9b::a9fe:a9fe", "0.0.0.0", "224.0.0.1", "ff02::1", "::"]
PUBLIC = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "2002:5db8:d822::1", "64:ff9b::5db8:d822"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_every_address_that_is_not_public_is_refused(address, monkeypatch):
    net = Network({"hook.example": [address]}).install(monkeypatch)
    failure = push.post("http://hook.example/hook", "s", _one_delivery())
    assert net.connects == [] and failure.startswith("push: refused: ") and "not a public address" in failure


@pytest.mark.parametrize("address", NEVER_EVEN_LOCALLY)
def test_the_local_switch_never_opens_metadata_link_local_or_multicast(address, loopback_allowed, monkeypatch):
    net = Network({"hook.example": [address]}).install(monkeypatch)
    failure = push.post("http://hook.example/hook", "s", _one_delivery())
    assert net.connects == [] and "not a public address" in failure


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_connected_to(address, monkeypatch):
    net = Network({"hook.example": [address]}).install(monkeypatch)
    failure = push.post("http://hook.example/hook", "s", _one_delivery())
    assert net.connects == [address] and "ConnectionRefusedError" in failure


def test_a_name_with_one_private_address_among_public_ones_is_refused(monkeypatch):
    net = Network({"hook.example": ["93.184.216.34"]}).install(monkeypatch)
    both = [("93.184.216.34", 80), ("10.0.0.7", 80)]
    monkeypatch.setattr("socket.getaddrinfo", lambda host, port, *a, **k: [
        (2, 1, 6, "", address) for address in both])
    failure = push.post("http://hook.example/hook", "s", _one_delivery())
    assert net.connects == [] and "10.0.0.7 is not a public address" in failure
