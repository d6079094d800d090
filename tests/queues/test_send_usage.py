"""A send's usage (its messages this month, the bytes it stores) is held back on the queue counter row
the send writes and folded into the tenant's figures once a row holds usage_pending_max_*() (64
messages or 64 KiB): plan_usage, the queue listing and the plan limits still see every message,
a limit is met as exactly as before, and concurrent sends count every message once."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from postbox import db
from postbox.errors import LimitExceeded
from postbox.queues import service

FREE_MONTH = 2_000_000
FREE_STORAGE = 2_147_483_648
HOLD_MESSAGES = 64
HOLD_BYTES = 65_536


def _usage(tenant) -> tuple[int, int]:
    """(messages this month, stored bytes) as plan_usage answers them."""
    with db.connection() as conn:
        return tuple(int(v) for v in conn.execute(
            "SELECT used_messages_month, used_storage_bytes FROM plan_usage(%s)", (tenant.tenant_id,)).fetchone())


def _folded(tenant) -> tuple[int, int]:
    """(messages this month, stored bytes) in the tenant's own counters, without what rows hold back."""
    with db.connection() as conn:
        return tuple(int(v) for v in conn.execute(
            "SELECT (SELECT coalesce(sum(messages), 0) FROM tenant_monthly_messages WHERE tenant_id = %(t)s"
            "         AND month = date_trunc('month', clock_timestamp())::date),"
            "       (SELECT coalesce(sum(stored_bytes), 0) FROM tenant_storage WHERE tenant_id = %(t)s)",
            {"t": tenant.tenant_id}).fetchone())


def _held(tenant) -> list[tuple[int, int]]:
    """(pending messages, pending bytes) of each of the tenant's queue counter rows."""
    with db.connection() as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT c.pending_messages, c.pending_bytes FROM queue_counters c JOIN queues q ON q.id = c.queue_id"
            " WHERE q.tenant_id = %s", (tenant.tenant_id,))]


def _fill(tenant, *, messages: int = 0, stored: int = 0) -> None:
    """Usage from elsewhere, on a slot no writer uses (99)."""
    with db.transaction() as conn:
        if messages:
            conn.execute("INSERT INTO tenant_monthly_messages (tenant_id, month, slot, messages)"
                         " VALUES (%s, date_trunc('month', clock_timestamp())::date, 99, %s)",
                         (tenant.tenant_id, messages))
        if stored:
            conn.execute("INSERT INTO tenant_storage (tenant_id, slot, stored_bytes) VALUES (%s, 99, %s)",
                         (tenant.tenant_id, stored))


def _size(message: object) -> int:
    from postbox import jsoncodec

    return len(jsoncodec.dumps(message, strict=True))


def test_usage_reaches_plan_usage_and_the_listing_before_and_after_a_fold(tenant):
    service.create_queue(tenant.principal, "q", {})
    service.send_messages(tenant.principal, "q", [{"n": i} for i in range(5)])
    bytes_5 = sum(_size({"n": i}) for i in range(5))
    assert _usage(tenant) == (5, bytes_5)
    assert _folded(tenant) == (0, 0)  # held back on the queue's counter row
    assert service.list_queues(tenant.principal)["usage"]["stored_bytes"] == bytes_5
    more = [{"n": i} for i in range(5, 100)]
    service.send_messages(tenant.principal, "q", more)  # the row reaches 64 messages: folded
    total = bytes_5 + sum(_size(m) for m in more)
    assert _usage(tenant) == (100, total)
    assert _folded(tenant)[0] in (95, 100)  # the 5 too, unless they went to another slot's row
    assert all(m < HOLD_MESSAGES for m, _ in _held(tenant))


def test_a_row_holding_64_kib_is_folded(tenant):
    service.create_queue(tenant.principal, "q", {})
    small, big = "x" * (HOLD_BYTES - 10), "x" * HOLD_BYTES
    service.send_messages(tenant.principal, "q", [small])  # under 64 KiB: held back
    assert _folded(tenant) == (0, 0)
    service.send_messages(tenant.principal, "q", [big])  # its row reaches 64 KiB, whichever row it is
    folded = _folded(tenant)
    assert folded in ((1, _size(big)), (2, _size(big) + _size(small)))
    assert _usage(tenant) == (2, _size(big) + _size(small))


def test_each_row_holds_less_than_the_bound_after_every_send(tenant):
    service.create_queue(tenant.principal, "q", {})
    for i in range(150):
        service.send_messages(tenant.principal, "q", [i] * (1 + i % 7))
        assert all(m < HOLD_MESSAGES and b < HOLD_BYTES for m, b in _held(tenant))
    assert _usage(tenant)[0] == sum(1 + i % 7 for i in range(150))


def test_a_tenant_at_its_monthly_limit_is_refused_counting_what_rows_hold_back(tenant, make_tenant):
    t = make_tenant(plan="free")
    service.create_queue(t.principal, "q", {})
    service.send_messages(t.principal, "q", list(range(10)))  # held back, not folded
    _fill(t, messages=FREE_MONTH - 11)  # folded: 10 short of the limit; with the 10 held back, 1
    assert _folded(t)[0] == FREE_MONTH - 11
    service.send_messages(t.principal, "q", [1])  # the last message of the month
    with pytest.raises(LimitExceeded) as refused:
        service.send_messages(t.principal, "q", [1])
    assert refused.value.code == "messages_month"
    with pytest.raises(LimitExceeded):  # a batch over what is left is refused whole
        service.send_messages(t.principal, "q", [1, 2])
    assert _usage(t)[0] == FREE_MONTH


def test_a_batch_that_would_pass_the_limit_is_refused_whole(make_tenant):
    t = make_tenant(plan="free")
    service.create_queue(t.principal, "q", {})
    _fill(t, messages=FREE_MONTH - 50)
    service.send_messages(t.principal, "q", list(range(20)))  # held back
    with pytest.raises(LimitExceeded):
        service.send_messages(t.principal, "q", list(range(31)))
    service.send_messages(t.principal, "q", list(range(30)))
    assert _usage(t)[0] == FREE_MONTH


def test_a_tenant_whose_storage_is_used_up_is_refused_counting_what_rows_hold_back(make_tenant):
    t = make_tenant(plan="free")
    service.create_queue(t.principal, "q", {})
    service.send_messages(t.principal, "q", ["x" * 1000])  # held back
    held = _size("x" * 1000)
    _fill(t, stored=FREE_STORAGE - held)  # folded alone: under the limit; with the row: at it
    with pytest.raises(LimitExceeded) as refused:
        service.send_messages(t.principal, "q", [1])
    assert refused.value.code == "storage_bytes"
    ids = service.read_messages(t.principal, "q", 1, 30)
    service.delete_messages(t.principal, "q", [ids[0]["msg_id"]])  # frees what it held
    service.send_messages(t.principal, "q", [1])
    assert _usage(t)[1] == FREE_STORAGE - held + _size(1)


def test_far_from_the_limits_no_row_is_counted_and_near_them_every_row_is(make_tenant):
    """The shortcut: plan_within is true while the folded figures leave room for all that the rows
    could hold back (8 slots x 25 queues x 64 messages on the free plan), false within it."""
    t = make_tenant(plan="free")
    bound = 8 * 25 * HOLD_MESSAGES
    with db.connection() as conn:
        def within(n: int) -> bool:
            return conn.execute("SELECT plan_within(%s, 10, %s)", (t.tenant_id, n)).fetchone()[0]

        assert within(1)
        _fill(t, messages=FREE_MONTH - bound - 1)
        assert within(1) and not within(2)
        assert not conn.execute("SELECT plan_within(%s, 262145, 1)", (t.tenant_id,)).fetchone()[0]


def test_messages_held_back_from_an_earlier_month_are_counted_in_that_month(tenant, database_url):
    """A row holding last month's messages is folded by its first send of this month: the held ones
    into last month, the new ones into this month; until then only this month's count as used."""
    service.create_queue(tenant.principal, "q", {})
    with db.connection() as conn:
        queue = conn.execute("SELECT id FROM queues WHERE tenant_id = %s", (tenant.tenant_id,)).fetchone()[0]
    last_month = "(date_trunc('month', clock_timestamp()) - interval '1 month')::date"
    with psycopg.connect(database_url, prepare_threshold=None, autocommit=True) as conn:  # one backend: one slot
        conn.execute("SELECT queue_count_sent(%s, 3, 30)", (queue,))
        conn.execute(f"UPDATE queue_counters SET pending_month = {last_month} WHERE queue_id = %s", (queue,))
        assert _usage(tenant) == (0, 30)
        conn.execute("SELECT queue_count_sent(%s, 2, 20)", (queue,))
        months = dict(conn.execute(
            f"SELECT month = {last_month}, sum(messages) FROM tenant_monthly_messages WHERE tenant_id = %s"
            " GROUP BY 1", (tenant.tenant_id,)).fetchall())
    assert months == {True: 3, False: 2}
    assert _usage(tenant) == (2, 50) and _folded(tenant) == (2, 50)
    assert all(row == (0, 0) for row in _held(tenant))


def test_deleting_a_queue_folds_what_its_rows_held_back(tenant):
    service.create_queue(tenant.principal, "keep", {})
    service.create_queue(tenant.principal, "gone", {})
    service.send_messages(tenant.principal, "keep", ["k"])
    ids = service.send_messages(tenant.principal, "gone", ["a", "b", "c"])
    service.archive_messages(tenant.principal, "gone", ids[:1])
    service.delete_queue(tenant.principal, "gone")
    assert _usage(tenant) == (4, _size("k"))  # the month keeps the 3; the storage is freed
    assert _folded(tenant) == (3, 0)


def test_concurrent_senders_count_every_message_once(tenant):
    """12 threads on their own connections send single messages and batches to two queues; every
    message is counted once in the queues' counters and in the tenant's usage."""
    for name in ("a", "b"):
        service.create_queue(tenant.principal, name, {})
    threads, rounds = 12, 40
    errors: list[BaseException] = []
    sent: list[list[int]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        try:
            start.wait()
            for r in range(rounds):
                batch = [{"t": i, "r": r, "k": k} for k in range(1 if r % 2 else 1 + (i + r) % 9)]
                sent[i].extend(service.send_messages(tenant.principal, "ab"[(i + r) % 2], batch))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    ids = [m for s in sent for m in s]
    assert len(ids) == len(set(ids))
    with db.connection() as conn:
        rows, size = conn.execute(
            "SELECT count(*), sum(m.size) FROM queue_messages m JOIN queues q ON q.id = m.queue_id"
            " WHERE q.tenant_id = %s", (tenant.tenant_id,)).fetchone()
        counted = conn.execute("SELECT sum(c.sent), sum(c.live_bytes) FROM queue_counters c"
                               " JOIN queues q ON q.id = c.queue_id WHERE q.tenant_id = %s",
                               (tenant.tenant_id,)).fetchone()
    assert rows == len(ids) and tuple(int(v) for v in counted) == (rows, size)
    assert _usage(tenant) == (rows, size)
    assert all(m < HOLD_MESSAGES and b < HOLD_BYTES for m, b in _held(tenant))


def test_concurrent_senders_at_the_limit_overshoot_by_at_most_the_sends_in_flight(make_tenant):
    """8 threads send single messages to a free tenant 30 messages short of its month, until each is
    refused: the limit may be passed only by sends whose checks ran while another's was uncommitted
    (fewer than the senders), as with the full count before."""
    t = make_tenant(plan="free")
    service.create_queue(t.principal, "q", {})
    service.send_messages(t.principal, "q", list(range(20)))  # held back on the row
    _fill(t, messages=FREE_MONTH - 50)
    threads = 8
    accepted = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        try:
            start.wait()
            while True:
                try:
                    service.send_messages(t.principal, "q", [i])
                except LimitExceeded:
                    return
                accepted[i] += 1
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    assert 30 <= sum(accepted) <= 30 + threads - 1
    assert _usage(t)[0] == FREE_MONTH - 30 + sum(accepted)
    with pytest.raises(LimitExceeded):
        service.send_messages(t.principal, "q", [1])


def test_the_send_plans_its_limit_check_inline(tenant):
    """plan_within is a set-returning SQL function so that the planner inlines it into the send's
    check statement, whose plan is kept with it (called as a scalar, it ran a query of its own every
    send); and the held-back bound is folded to constants (a record-returning call is not)."""
    with db.connection() as conn:
        plan = conn.execute("EXPLAIN (FORMAT JSON, VERBOSE) SELECT (SELECT w.within FROM plan_within(%s, 10, 1) w)",
                            (tenant.tenant_id,)).fetchone()[0]
    text = json.dumps(plan)
    assert "plan_within" not in text
    assert "usage_pending_max" not in text
    assert "tenant_monthly_messages" in text  # the check itself is there, inline
