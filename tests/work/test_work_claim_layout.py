"""The work surface's claim layout: a claim updates its rows in place, the claim walk takes claims
that ran out (dead-lettering those on their last attempt without shortening the batch), and
listing by state finds live and ended messages alike."""

from __future__ import annotations

from datetime import UTC, datetime

from postbox import db
from postbox.work import browse, messages, queues, scopes
from support.clock import wait_for_db_clock

_IN_PLACE = """
SELECT pg_stat_get_xact_tuples_updated('work_messages'::regclass),
       pg_stat_get_xact_tuples_hot_updated('work_messages'::regclass)
"""


def _setup(tenant, slug, **queue_fields):
    s = scopes.create_scope(tenant.principal, {"slug": slug})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs", **queue_fields})
    return s, q


def _publish(tenant, s, q, body, **fields):
    return messages.publish(tenant.principal, s["id"], q["id"], {"body": body, **fields})[0]


def _claim(tenant, s, q, n, vt):
    return messages.claim(tenant.principal, s["id"], q["id"], n, vt)


def test_a_claim_updates_its_rows_in_place(tenant):
    s, q = _setup(tenant, "in-place")
    for i in range(20):
        _publish(tenant, s, q, i)
    with db.transaction() as conn:  # the counts are the backend's not yet reported: take the difference
        updated_before, hot_before = conn.execute(_IN_PLACE).fetchone()
        claimed = conn.execute("SELECT work_claim(%s, %s, %s, 20, 60, 'k')",
                               (tenant.tenant_id, s["id"], q["id"])).fetchone()[0]
        updated, hot = conn.execute(_IN_PLACE).fetchone()
    updated, hot = updated - updated_before, hot - hot_before
    assert len(claimed) == 20 and updated == 20
    # No index holds a column the claim changes: the rows are rewritten in place (HOT) wherever the
    # page has room (half of each page is kept free), so at most a few land on another page.
    assert hot >= 15


def test_an_expired_claim_on_its_last_attempt_is_dead_lettered_and_the_batch_still_fills(tenant):
    s, q = _setup(tenant, "last-attempt")
    first = _publish(tenant, s, q, "first", max_retries=1)
    others = [_publish(tenant, s, q, f"m{i}") for i in range(3)]
    [taken] = _claim(tenant, s, q, 1, 1)
    assert taken["id"] == first["id"]
    wait_for_db_clock(datetime.fromisoformat(taken["claim_expires_at"]))
    batch = _claim(tenant, s, q, 3, 60)
    assert [m["id"] for m in batch] == [m["id"] for m in others]
    ended, _ = browse.list_messages(tenant.principal, s["id"], q["id"], "dead_lettered")
    assert [m["id"] for m in ended] == [first["id"]]
    assert ended[0]["failure_reason"] == "visibility timeout expired after the last attempt"
    st = queues.stats(tenant.principal, s["id"], q["id"])
    assert (st["depth_pending"], st["depth_claimed"], st["dead_lettered_total"]) == (0, 3, 1)
    copy = queues.stats(tenant.principal, s["id"], s["system_queues"]["_dead_letter"])
    assert copy["depth_pending"] == 1


def test_an_expired_claim_is_claimed_again_in_order_with_its_reason(tenant):
    s, q = _setup(tenant, "again")
    a = _publish(tenant, s, q, "a")
    [taken] = _claim(tenant, s, q, 1, 1)
    b = _publish(tenant, s, q, "b")
    wait_for_db_clock(datetime.fromisoformat(taken["claim_expires_at"]))
    batch = _claim(tenant, s, q, 5, 60)
    assert [m["id"] for m in batch] == [a["id"], b["id"]]  # the older message first, as published
    assert batch[0]["attempts"] == 2 and batch[0]["failure_reason"] == "visibility timeout"
    assert batch[1]["attempts"] == 1 and batch[1]["failure_reason"] is None
    st = queues.stats(tenant.principal, s["id"], q["id"])
    assert (st["depth_pending"], st["depth_claimed"]) == (0, 2)


def test_listing_by_state_finds_live_and_ended_messages(tenant):
    s, q = _setup(tenant, "listing")
    ids = [_publish(tenant, s, q, i)["id"] for i in range(5)]
    claimed = _claim(tenant, s, q, 3, 60)
    done = messages.finish_batch(tenant.principal, s["id"], "complete",
                                 [{"id": claimed[0]["id"], "claim_token": claimed[0]["claim_token"]}])
    assert done[0]["ok"]
    messages.finish(tenant.principal, s["id"], ids[4], "cancel", {})

    def listed(state):
        return [m["id"] for m in browse.list_messages(tenant.principal, s["id"], q["id"], state)[0]]

    assert listed("pending") == [ids[3]]
    assert listed("claimed") == ids[1:3]
    assert listed("completed") == [ids[0]]
    assert listed("cancelled") == [ids[4]]
    assert listed("expired") == []
    first, cursor = browse.list_messages(tenant.principal, s["id"], q["id"], "claimed", limit=1)
    rest, _ = browse.list_messages(tenant.principal, s["id"], q["id"], "claimed", limit=1, cursor=cursor)
    assert [m["id"] for m in first + rest] == ids[1:3]


def _head_only(q):
    """From now on claims of this fifo queue walk from its head unless they come short (no walk from
    the front every 250 ms), so a test sees what the head alone finds."""
    with db.connection() as conn:
        conn.execute("UPDATE work_claim_heads SET scanned_at = 'infinity' "
                     "WHERE queue_id = (SELECT id FROM work_queues WHERE queue_id = %s)", (q["id"],))


def test_a_release_or_a_fail_pulls_the_fifo_claim_head_back(tenant):
    s, q = _setup(tenant, "head-back")
    ids = [_publish(tenant, s, q, i)["id"] for i in range(4)]
    first, second = _claim(tenant, s, q, 1, 60) + _claim(tenant, s, q, 1, 60)
    _head_only(q)
    messages.finish(tenant.principal, s["id"], first["id"], "release", {"claim_token": first["claim_token"]})
    assert [m["id"] for m in _claim(tenant, s, q, 1, 60)] == [ids[0]]  # not ids[2], next after the head
    out = messages.finish_batch(tenant.principal, s["id"], "release",
                                [{"id": second["id"], "claim_token": second["claim_token"]}])
    assert out[0]["ok"]
    assert [m["id"] for m in _claim(tenant, s, q, 1, 60)] == [ids[1]]


def test_a_claim_that_comes_short_from_the_head_looks_behind_it(tenant):
    s, q = _setup(tenant, "short")
    soon = (datetime.fromisoformat(_publish(tenant, s, q, "probe")["created_at"]).timestamp() + 1.5)
    probe_claim = _claim(tenant, s, q, 1, 60)  # the head moves past the probe
    assert len(probe_claim) == 1
    delayed = _publish(tenant, s, q, "delayed", visible_at=datetime.fromtimestamp(soon, UTC).isoformat())
    later = _publish(tenant, s, q, "later")
    assert [m["id"] for m in _claim(tenant, s, q, 5, 60)] == [later["id"]]  # the head is now past both
    _head_only(q)
    wait_for_db_clock(datetime.fromisoformat(delayed["visible_at"]))
    assert [m["id"] for m in _claim(tenant, s, q, 5, 60)] == [delayed["id"]]
