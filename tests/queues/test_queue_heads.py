"""The claim head (queue_heads, queue_claim): reads start where visible messages begin, and nothing behind the
head is lost: messages that turn visible there come back at once or within the full-walk interval."""

from __future__ import annotations

import threading
import time
from collections import Counter

from postbox import db
from postbox.queues import service

FULL_WALK_S = 0.25  # queue_claim walks from the front when its last full walk is older than this


def _read_ids(tenant, name="q", qty=100, vt=30) -> list[int]:
    return [m["msg_id"] for m in service.read_messages(tenant.principal, name, qty, vt)]


def _head(queue_name: str, tenant) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT h.head FROM queue_heads h JOIN queues q ON q.id = h.queue_id"
                            " WHERE q.tenant_id = %s AND q.name = %s", (tenant.tenant_id, queue_name)).fetchone()[0]


def _read_until(tenant, want: int, seconds: float, name="q") -> tuple[list[int], float]:
    """Read until `want` comes back or `seconds` pass; returns what was read and how long it took."""
    start = time.monotonic()
    got: list[int] = []
    while time.monotonic() - start < seconds:
        got += _read_ids(tenant, name)
        if want in got:
            break
        time.sleep(0.02)
    return got, time.monotonic() - start


def test_a_queue_gets_its_head_row_and_loses_it_with_the_queue(tenant):
    service.create_queue(tenant.principal, "q", {})
    assert _head("q", tenant) == 0
    service.delete_queue(tenant.principal, "q")
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM queue_heads h LEFT JOIN queues q ON q.id = h.queue_id"
                            " WHERE q.id IS NULL").fetchone()[0] == 0


def test_reads_move_the_head_past_what_they_claimed(tenant):
    service.create_queue(tenant.principal, "q", {})
    ids = service.send_messages(tenant.principal, "q", list(range(10)))
    assert _read_ids(tenant, qty=4) == ids[:4]
    assert _head("q", tenant) == ids[3] + 1
    assert _read_ids(tenant, qty=100) == ids[4:]
    assert _head("q", tenant) == ids[-1] + 1


def test_a_message_committed_after_later_ones_is_still_read(tenant):
    """A send whose id was drawn before another's but committed after it lands behind the head."""
    service.create_queue(tenant.principal, "q", {})
    with db.connection() as conn:
        late_id = conn.execute("SELECT nextval('queue_msg_id_seq')").fetchone()[0]
    [early_id] = service.send_messages(tenant.principal, "q", ["early"])
    assert _read_ids(tenant) == [early_id]
    with db.connection() as conn:  # the late send commits now, with the id it drew first
        conn.execute("INSERT INTO queue_messages (queue_id, msg_id, vt, message, size)"
                     " SELECT id, %s, clock_timestamp(), '\"late\"', 6 FROM queues"
                     " WHERE tenant_id = %s AND name = 'q'", (late_id, tenant.tenant_id))
    assert late_id < early_id < _head("q", tenant)
    got, took = _read_until(tenant, late_id, 3)
    assert got == [late_id] and took < 1.0


def test_visibility_expiry_behind_the_head_redelivers(tenant):
    service.create_queue(tenant.principal, "q", {})
    first, second = service.send_messages(tenant.principal, "q", ["a", "b"])
    assert _read_ids(tenant, qty=1, vt=1) == [first]
    assert _read_ids(tenant, qty=1, vt=30) == [second]
    assert _head("q", tenant) > second
    time.sleep(1.0)
    got, took = _read_until(tenant, first, 3)
    assert got == [first] and took < 1.0


def test_set_vt_to_zero_is_read_at_once_behind_the_head(tenant):
    service.create_queue(tenant.principal, "q", {})
    first, second = service.send_messages(tenant.principal, "q", ["a", "b"])
    assert _read_ids(tenant) == [first, second]
    time.sleep(FULL_WALK_S)  # make sure the read below is not a full walk that would find it anyway
    _read_ids(tenant)
    service.set_visibility(tenant.principal, "q", first, 0)
    assert _read_ids(tenant) == [first]


def test_a_read_hiding_for_under_a_second_leaves_the_head(tenant):
    service.create_queue(tenant.principal, "q", {})
    [msg_id] = service.send_messages(tenant.principal, "q", ["a"])
    assert _read_ids(tenant, vt=0) == [msg_id]
    assert _read_ids(tenant, vt=0) == [msg_id]
    assert _head("q", tenant) <= msg_id


def test_a_dead_letter_with_an_older_id_is_read_from_the_dead_letter_queue_at_once(tenant):
    service.create_queue(tenant.principal, "dlq", {})
    service.create_queue(tenant.principal, "q", {"max_reads": 1, "dead_letter_queue": "dlq"})
    [poison] = service.send_messages(tenant.principal, "q", ["poison"])
    [other] = service.send_messages(tenant.principal, "dlq", ["other"])
    assert _read_ids(tenant, "dlq") == [other]
    assert _head("dlq", tenant) > poison
    assert _read_ids(tenant, vt=0) == [poison]
    assert _read_ids(tenant) == []  # read max_reads times: moved to the dead-letter queue, keeping its id
    assert _read_ids(tenant, "dlq") == [poison]


def test_senders_and_readers_at_once_get_every_message_exactly_once(tenant):
    """Concurrent sends commit out of id order, so some land behind the head while readers run."""
    service.create_queue(tenant.principal, "q", {})
    senders, per_sender, batch = 3, 3_000, 50
    sent: list[int] = []
    got: Counter[int] = Counter()
    lock = threading.Lock()
    sending = threading.Event()
    errors: list[BaseException] = []

    def send() -> None:
        try:
            for start in range(0, per_sender, batch):
                ids = service.send_messages(tenant.principal, "q", list(range(start, start + batch)))
                with lock:
                    sent.extend(ids)
        except BaseException as error:  # surfaced below
            errors.append(error)

    def read() -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ids = _read_ids(tenant, qty=20)
                if ids:
                    assert service.archive_messages(tenant.principal, "q", ids) == sorted(ids)
                    with lock:
                        got.update(ids)
                elif not sending.is_set():
                    with lock:
                        if len(got) == senders * per_sender:
                            return
                    time.sleep(0.05)
        except BaseException as error:  # surfaced below
            errors.append(error)

    sending.set()
    send_threads = [threading.Thread(target=send) for _ in range(senders)]
    read_threads = [threading.Thread(target=read) for _ in range(3)]
    for t in send_threads + read_threads:
        t.start()
    for t in send_threads:
        t.join()
    sending.clear()
    for t in read_threads:
        t.join()
    assert not errors
    assert len(sent) == senders * per_sender
    assert set(got) == set(sent) and max(got.values()) == 1
