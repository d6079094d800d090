"""The log engine's lease module on its own, with no surface: grant, hold, extend, fail by a
retry policy (retry, then dead letters handed to the caller's store), expiry, and a nack inside a
batch. Owned by a kind no surface uses, so nothing but this module acts on these cursors."""

from __future__ import annotations

import random

from postbox import db
from postbox.log_engine import cursors, leases, store
from postbox.log_engine.frames import Record
from postbox.log_engine.retry import RetryPolicy

KIND = "lease-test"


def _log(tenant, n: int):
    owner = random.randrange(1, 2**31)
    with db.transaction() as conn:
        part = store.ensure_partition(conn, tenant.tenant_id, KIND, owner, "p")
        store.append(conn, part.id, [Record(f"m{i}".encode(), id=f"t{i}") for i in range(n)])
        cursors.ensure(conn, KIND, owner, "g")
    return owner


def _lease(owner: int, batch: int = 10):
    """Claim and lease the next batch: (cursor as claimed, payloads, lease id)."""
    with db.transaction() as conn:
        claimed = cursors.claim(conn, KIND, owner, "g", batch)
        if claimed is None:
            return None
        cur, entries = claimed
        lease_id, _ = leases.grant(conn, cur, entries[-1].offset + 1, 60, entries[-1].id)
        return cur, [e.payload.decode() for e in entries], lease_id


def _fail(lease_id: str, policy: RetryPolicy, dead: list | None, *, upto: int | None = None) -> bool:
    def record(conn, cur, entries, attempts, error):
        dead.append(([e.payload.decode() for e in entries], attempts, error))

    with db.transaction() as conn:
        cur = leases.held(conn, lease_id)
        sink = record if dead is not None else None
        if upto is None:
            return leases.fail(conn, cur, cur.committed, cur.attempts + 1, policy, sink, "boom")
        return leases.fail_rest(conn, cur, upto, policy, sink, "boom")


def test_a_lease_is_held_by_its_token_and_extends(tenant):
    owner = _log(tenant, 3)
    cur, payloads, lease_id = _lease(owner)
    assert (payloads, cur.attempts) == (["m0", "m1", "m2"], 0)
    assert _lease(owner) is None  # one lease per partition and group
    with db.transaction() as conn:
        held = leases.held(conn, lease_id)
        assert held.lease_live and (held.batch_start, held.batch_end, held.batch_last_id) == (0, 3, "t2")
        before = conn.execute("SELECT lease_expires_at FROM log_cursors WHERE lease_id = %s", (lease_id,)).fetchone()[0]
        assert leases.extend(conn, held, 3600) > before
        assert leases.held(conn, "not-a-uuid") is None


def test_failures_retry_until_max_attempts_then_the_batch_goes_to_the_dead_letters(tenant):
    owner = _log(tenant, 2)
    policy, dead = RetryPolicy(max_attempts=3), []
    for attempt in (1, 2):
        cur, payloads, lease_id = _lease(owner)
        assert (payloads, cur.attempts) == (["m0", "m1"], attempt - 1)
        assert _fail(lease_id, policy, dead) is False
    cur, _, lease_id = _lease(owner)
    assert cur.attempts == 2
    assert _fail(lease_id, policy, dead) is True
    assert dead == [(["m0", "m1"], 3, "boom")]
    assert _lease(owner) is None  # the cursor moved past the dead batch
    with db.transaction() as conn:
        assert cursors.slowest(conn, store.find_partition(conn, KIND, owner, "p").id) == 2


def test_without_a_dead_letter_store_an_exhausted_batch_is_skipped(tenant):
    owner = _log(tenant, 2)
    _, _, lease_id = _lease(owner)
    assert _fail(lease_id, RetryPolicy(max_attempts=1), None) is True
    assert _lease(owner) is None


def test_an_expired_lease_is_a_failed_delivery(tenant):
    owner = _log(tenant, 1)
    _, _, lease_id = _lease(owner)
    with db.transaction() as conn:
        conn.execute("UPDATE log_cursors SET lease_expires_at = clock_timestamp() - interval '1 second'"
                     " WHERE lease_id = %s", (lease_id,))
        found = [c for c in leases.expired(conn, KIND, 1000) if c.owner_id == owner]
        assert [c.lease_id for c in found] == [lease_id] and not found[0].lease_live
        assert leases.expire(conn, found[0], RetryPolicy(max_attempts=5), None) is False
    cur, payloads, _ = _lease(owner)
    assert (payloads, cur.attempts) == (["m0"], 1)


def test_a_nack_inside_the_batch_commits_what_precedes_it_and_starts_the_attempts_again(tenant):
    owner = _log(tenant, 4)
    _, _, lease_id = _lease(owner)
    assert _fail(lease_id, RetryPolicy(5), []) is False  # attempts 1 on m0..m3
    _, payloads, lease_id = _lease(owner)
    assert _fail(lease_id, RetryPolicy(5), [], upto=2) is False  # m0, m1 done; m2 fails for the first time
    cur, payloads, lease_id = _lease(owner)
    assert (payloads, cur.attempts) == (["m2", "m3"], 1)
    assert _fail(lease_id, RetryPolicy(5), [], upto=2) is False  # no progress: the same batch fails again
    cur, payloads, _ = _lease(owner)
    assert (payloads, cur.attempts) == (["m2", "m3"], 2)
