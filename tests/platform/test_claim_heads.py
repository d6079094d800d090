"""The claim-head rule (sql/functions/claim_heads.sql) as both surfaces keeping a head obey it: the queues
surface (queue_heads, queue_claim) and the work surface's fifo queues (work_claim_heads, work_claim).

Each case drives one surface through its domain layer and sets its head row directly, so that what a claim
finds is what the head alone decides: a message behind a fresh head is not walked to, one behind a head
whose last walk from the front is over 250 ms old is, and a message made visible again behind the head
pulls it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from postbox import db
from postbox.queues import service
from postbox.work import messages, queues, scopes

FUNCTIONS = Path(__file__).resolve().parents[2] / "shared" / "postbox" / "sql" / "functions"


class QueuesSurface:
    table = "queue_heads"

    def __init__(self, tenant) -> None:
        self.principal = tenant.principal
        service.create_queue(self.principal, "heads", {})
        with db.connection() as conn:
            self.row = conn.execute("SELECT id FROM queues WHERE tenant_id = %s AND name = 'heads'",
                                    (tenant.tenant_id,)).fetchone()[0]

    def send(self, n: int) -> list[int]:
        return service.send_messages(self.principal, "heads", list(range(n)))  # its place in the walk: its id

    def claim(self, n: int) -> list[int]:
        return [m["msg_id"] for m in service.read_messages(self.principal, "heads", n, 60)]

    def make_visible(self, position: int) -> None:
        service.set_visibility(self.principal, "heads", position, 0)


class WorkSurface:
    table = "work_claim_heads"

    def __init__(self, tenant) -> None:
        self.principal = tenant.principal
        self.scope = str(scopes.create_scope(self.principal, {"slug": "heads"})["id"])
        self.queue = str(queues.create_queue(self.principal, self.scope, {"slug": "jobs"})["id"])
        with db.connection() as conn:
            self.row = conn.execute("SELECT id FROM work_queues WHERE queue_id = %s", (self.queue,)).fetchone()[0]
        self.ids: dict[int, str] = {}
        self.tokens: dict[int, str] = {}

    def _seq(self, message_id) -> int:
        with db.connection() as conn:
            return conn.execute("SELECT seq FROM work_messages WHERE id = %s", (message_id,)).fetchone()[0]

    def send(self, n: int) -> list[int]:
        out = []
        for i in range(n):
            message, _ = messages.publish(self.principal, self.scope, self.queue, {"body": {"n": i}})
            seq = self._seq(message["id"])
            self.ids[seq] = str(message["id"])
            out.append(seq)
        return out  # a message's place in the walk is its seq

    def claim(self, n: int) -> list[int]:
        got = messages.claim(self.principal, self.scope, self.queue, n, 60)
        seqs = [self._seq(m["id"]) for m in got]
        self.tokens.update({s: str(m["claim_token"]) for s, m in zip(seqs, got, strict=True)})
        return seqs

    def make_visible(self, position: int) -> None:
        messages.finish(self.principal, self.scope, self.ids[position], "release",
                        {"claim_token": self.tokens[position]})


@pytest.fixture(params=["queues", "work"])
def surface(request, tenant):
    return (QueuesSurface if request.param == "queues" else WorkSurface)(tenant)


def _head(surface) -> tuple[int, bool]:
    """The head and whether its last walk from the front was just now."""
    with db.connection() as conn:
        return conn.execute(f"SELECT head, scanned_at > clock_timestamp() - interval '5 seconds'"  # noqa: S608
                            f" FROM {surface.table} WHERE queue_id = %s", (surface.row,)).fetchone()


def _set_head(surface, head: int, scanned: str) -> None:
    with db.connection() as conn:
        conn.execute(f"UPDATE {surface.table} SET head = %s, scanned_at = {scanned}"  # noqa: S608
                     " WHERE queue_id = %s", (head, surface.row))


def test_both_surfaces_define_the_rule_only_through_claim_heads():
    for name in ("queues.sql", "work_claims.sql"):
        text = (FUNCTIONS / name).read_text()
        assert "250 milliseconds" not in text and "claim_head_full(" in text and "claim_head_next(" in text
        assert "claim_head_back(" in text
    assert "interval '250 milliseconds'" in (FUNCTIONS / "claim_heads.sql").read_text()


def test_a_claim_walks_from_a_fresh_head_and_from_the_front_once_it_is_stale(surface):
    ids = surface.send(5)
    assert surface.claim(1) == ids[:1]
    # ids[1] now sits behind the head, as a message committed late or a busy head row leaves one.
    _set_head(surface, ids[2], "clock_timestamp() + interval '1 hour'")  # walked from the front just now
    assert surface.claim(1) == [ids[2]]
    assert _head(surface)[0] == ids[2] + 1  # moved past what it took
    _set_head(surface, ids[3], "clock_timestamp() - interval '300 milliseconds'")  # over 250 ms ago
    assert surface.claim(1) == [ids[1]]  # from the front: the message behind the head
    head, walked = _head(surface)
    assert head == ids[1] + 1 and walked  # a walk from the front that filled its batch sets the head there
    _set_head(surface, ids[3], "clock_timestamp() - interval '200 milliseconds'")  # under 250 ms: the head
    assert surface.claim(1) == [ids[3]]
    assert _head(surface)[0] == ids[3] + 1


def test_a_message_visible_again_behind_the_head_pulls_it_back(surface):
    ids = surface.send(4)
    assert surface.claim(3) == ids[:3]
    _set_head(surface, ids[3], "clock_timestamp() + interval '1 hour'")  # no walk from the front
    surface.make_visible(ids[1])
    assert _head(surface)[0] == ids[1]
    surface.make_visible(ids[2])
    assert _head(surface)[0] == ids[1]  # back to a message, never forward
    assert surface.claim(2) == ids[1:3]


def test_the_rule_in_sql():
    with db.connection() as conn:
        one = conn.execute(
            "SELECT claim_head_full(NULL, 1, 1), claim_head_full(clock_timestamp() - interval '200 ms', 1, 1),"
            " claim_head_full(clock_timestamp() - interval '300 ms', 1, 1),"
            " claim_head_next(10, NULL, true, true), claim_head_next(10, 4, true, true),"
            " claim_head_next(10, 4, true, false), claim_head_next(10, 14, false, true),"
            " claim_head_moves(10, 4, false), claim_head_moves(10, NULL, false), claim_head_moves(10, NULL, true),"
            " claim_head_back(10, 4), claim_head_back(4, 10), claim_head_from(10, true), claim_head_from(10, false)"
        ).fetchone()
    assert one == (True, False, True, 10, 4, 10, 14, False, False, True, 4, 4, 0, 10)
