"""Auto-claimed subscriptions: work assigned to a subscriber, and a subscriber's deliveries listed.

A pull subscription with `auto_claim` has its deliveries claimed for it as they arrive (the
publish's fan-out does it while the subscription holds fewer than `max_in_flight`); `assign_due`
is the agent's sweep that assigns the rest as claims end or run out. The subscriber reads what it
holds, with claim tokens, from `list_deliveries`, and finishes each as a pulled delivery.
"""

from __future__ import annotations

from typing import Any

from .. import db
from ..tenancy import Principal, require
from . import acl
from .common import CONSUME, SCOPE_NOT_FOUND, decode_cursor, page, parse_id
from .subscriptions import sub_id_of

STATES = ("pending", "claimed", "completed", "dead_lettered", "expired")
SUBSCRIPTIONS_PER_RUN = 200

# A broadcast subscription's deliveries; a competing one's are the messages it claimed (`claimed_for`),
# none of them pending (a message it released is pending for every claimer).
_LIST = """
WITH x AS (SELECT (work_subscription_of(%(t)s, %(s)s, %(x)s, false)).* FROM work_acl_check(%(acl)s::jsonb) _)
SELECT d.seq, v.doc
FROM work_deliveries d
JOIN work_delivery_docs v ON v.subscription_id = d.subscription_id AND v.message_id = d.message_id
WHERE d.subscription_id = (SELECT id FROM x) AND d.state = %(state)s AND d.seq > %(after)s
UNION ALL
SELECT m.seq, to_jsonb(md) || jsonb_build_object('subscription_id', m.claimed_for)
FROM work_messages m JOIN work_message_docs md ON md.id = m.id
WHERE m.claimed_for = (SELECT id FROM x) AND m.queue_id = (SELECT queue_id FROM x)
  AND m.state = %(state)s AND m.state <> 'pending' AND m.seq > %(after)s
ORDER BY 1 LIMIT %(n)s
"""


def list_deliveries(principal: Principal, scope_id: str, sub_id: str, state: str, limit: int = 50,
                    cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """The subscription's deliveries (or, on a competing queue, the messages it claimed) in one state,
    oldest first, with claim tokens (so `consume`)."""
    tenant_id = require(principal, CONSUME)
    scope_id, sub_id = parse_id(scope_id, SCOPE_NOT_FOUND), sub_id_of(sub_id)
    after = decode_cursor(cursor, "deliveries") or 0
    with db.connection() as conn, db.domain_errors():
        rows = conn.execute(_LIST, {"t": tenant_id, "s": scope_id, "x": sub_id, "state": state,
                                    "after": int(after), "n": limit + 1,
                                    "acl": acl.guard(principal, tenant_id, scope_id, CONSUME,
                                                     subscription=sub_id)}).fetchall()
    rows, nxt = page(rows, limit, "deliveries", lambda r: r[0])
    return [r[1] for r in rows], nxt


def assign_due(limit: int = SUBSCRIPTIONS_PER_RUN) -> int:
    """Assign what waits for every due auto-claimed subscription (each within its max_in_flight,
    one transaction per subscription); returns how many deliveries were claimed."""
    with db.connection() as conn:
        due = conn.execute("SELECT * FROM work_auto_claim_due(%s)", (limit,)).fetchall()
    assigned = 0
    for sub_id, tenant_id, scope_id, in_flight in due:
        with db.connection() as conn:
            claimed = conn.execute("SELECT jsonb_array_length(work_subscription_claim(%s, %s, %s, %s, NULL))",
                                   (tenant_id, scope_id, sub_id, in_flight)).fetchone()[0]
        assigned += claimed
    return assigned
