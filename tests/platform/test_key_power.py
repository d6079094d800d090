"""The one rule of every key operation (`postbox.key_power`), field by field: a key equal to the
caller's or narrower is within its power; a wider one, or one without a bound the caller has, is
not, and the refusal names the field. A caller without a bound (the full-power tenant key) and
`postbox admin` (no caller) pass every field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from postbox.errors import Forbidden
from postbox.key_power import beyond, require_within, within
from postbox.tenancy import Principal

SCOPE_A, SCOPE_B, SCOPE_C = ("6f1c2b1e-0000-4000-8000-00000000000a", "6f1c2b1e-0000-4000-8000-00000000000b",
                             "6f1c2b1e-0000-4000-8000-00000000000c")
WHEN = datetime(2030, 1, 1, tzinfo=UTC)

# A work key bound by every field it can be, and a tenant key bound by role, project and expiry.
WORK = Principal("t", None, "work", "k1", ("scaiqueue:manage", "scaiqueue:publish"), "service", "boss",
                 allowed_scopes=(SCOPE_A, SCOPE_B), ip_allowlist=("10.0.0.0/8", "2001:db8::/32"), expires_at=WHEN)
TENANT = Principal("t", "p1", "write", "k2", (), expires_at=WHEN)
FULL = Principal("t", None, "manage", "k3")

EQUAL, NARROWER, WIDER, ABSENT = "equal", "narrower", "wider", "absent"

# (caller, field, value, case): every field against every case it has.
CASES = [
    (WORK, "allowed_operations", ["scaiqueue:manage", "scaiqueue:publish"], EQUAL),
    (WORK, "allowed_operations", ["scaiqueue:publish"], NARROWER),
    (WORK, "allowed_operations", ["scaiqueue:publish", "scaiqueue:consume"], WIDER),
    (WORK, "allowed_operations", ["scaiqueue:view"], WIDER),  # manage does not imply view for a work key
    (TENANT, "allowed_operations", ["scaiqueue:view", "scaiqueue:consume"], NARROWER),  # its role reaches them
    (TENANT, "allowed_operations", ["scaiqueue:manage"], WIDER),
    (WORK, "allowed_scopes", [SCOPE_A, SCOPE_B], EQUAL),
    (WORK, "allowed_scopes", [SCOPE_B.upper()], NARROWER),
    (WORK, "allowed_scopes", [SCOPE_A, SCOPE_C], WIDER),
    (WORK, "allowed_scopes", None, ABSENT),
    (WORK, "subject", ("service", "boss"), EQUAL),
    (WORK, "subject", ("service", "admin"), WIDER),
    (WORK, "subject", ("user", "boss"), WIDER),
    (WORK, "ip_allowlist", ["10.0.0.0/8", "2001:db8::/32"], EQUAL),
    (WORK, "ip_allowlist", ["10.1.0.0/16", "10.2.3.4/32", "2001:db8:1::/48"], NARROWER),
    (WORK, "ip_allowlist", ["10.0.0.0/7"], WIDER),
    (WORK, "ip_allowlist", ["10.0.0.0/8", "192.168.0.0/16"], WIDER),
    (WORK, "ip_allowlist", ["::ffff:10.0.0.0/104"], WIDER),  # another version is never inside
    (WORK, "ip_allowlist", None, ABSENT),
    (WORK, "expires_at", WHEN, EQUAL),
    (WORK, "expires_at", WHEN.isoformat(), EQUAL),  # as a key's metadata spells it
    (WORK, "expires_at", WHEN - timedelta(days=1), NARROWER),
    (WORK, "expires_at", WHEN + timedelta(seconds=1), WIDER),
    (WORK, "expires_at", None, ABSENT),
    (TENANT, "expires_at", WHEN, EQUAL),
    (TENANT, "expires_at", None, ABSENT),
    (TENANT, "role", "write", EQUAL),
    (TENANT, "role", "read", NARROWER),
    (TENANT, "role", "manage", WIDER),
    (WORK, "role", "read", WIDER),  # a work key holds no tenant role
    (TENANT, "project", "p1", EQUAL),
    (TENANT, "project", "p2", WIDER),
    (TENANT, "project", None, ABSENT),
]


@pytest.mark.parametrize(("caller", "field", "value", "case"), CASES,
                         ids=[f"{c.role}-{f}-{case}-{i}" for i, (c, f, _, case) in enumerate(CASES)])
def test_every_field_against_every_rule(caller, field, value, case):
    found = beyond(caller, {field: value})
    if case in (EQUAL, NARROWER):
        assert found is None, found
        require_within(caller, {field: value}, "mint")
    else:
        assert found is not None and found[0] == field
        with pytest.raises(Forbidden) as refused:
            require_within(caller, {field: value}, "rotate")
        assert refused.value.details == {"field": field}
        assert f"cannot rotate a key beyond its own power: {field} " in refused.value.message


@pytest.mark.parametrize(("field", "value"), [(f, v) for _, f, v, _ in CASES])
def test_a_full_power_key_and_postbox_admin_pass_every_field(field, value):
    assert within(FULL, {field: value})
    assert within(None, {field: value})


def test_the_first_field_beyond_is_named():
    power = {"allowed_operations": ["scaiqueue:publish"], "subject": ("service", "boss"),
             "ip_allowlist": None, "expires_at": None}
    assert beyond(WORK, power)[0] == "ip_allowlist"
    assert "10.0.0.0/7" in beyond(WORK, {"ip_allowlist": ["10.0.0.0/7"]})[1]
    assert "2030-01-01" in beyond(WORK, {"expires_at": None})[1]

