"""The key resolver's check of a work key's own limits (scopes by path, client address by CIDR)."""

from __future__ import annotations

from functions.keys import refusal
from postbox.tenancy import Principal

SCOPE = "6f1c2b1e-0000-4000-8000-000000000001"
W = "/v1/modules/scaiqueue"


def key(**limits) -> Principal:
    return Principal("t", None, "work", "k", ("scaiqueue:view",), "agent", "a", **limits)


def test_no_limits_refuse_nothing():
    assert refusal(key(), "/anything", None) is None


def test_scopes_by_path():
    limited = key(allowed_scopes=(SCOPE,))
    assert refusal(limited, f"{W}/scopes/{SCOPE}/queues", "1.2.3.4") is None
    assert refusal(limited, f"{W}/scopes/{SCOPE.upper()}", "1.2.3.4") is None
    assert refusal(limited, f"{W}/whoami", "1.2.3.4") is None
    assert "not allowed in this scope" in refusal(limited, f"{W}/scopes/6f1c2b1e-0000-4000-8000-000000000002", None)
    for path in (f"{W}/scopes", f"{W}/system-agents", f"{W}/tenants/t/api-keys", "/api/v1/queues", None):
        assert "limited to some scopes" in refusal(limited, path, None)


def test_addresses_by_cidr():
    limited = key(ip_allowlist=("10.0.0.0/8", "2001:db8::/32"))
    assert refusal(limited, "/", "10.200.1.1") is None
    assert refusal(limited, "/", "2001:db8::7") is None
    assert "not allowed from 192.168.1.1" in refusal(limited, "/", "192.168.1.1")
    assert "not allowed from 2001:db9::1" in refusal(limited, "/", "2001:db9::1")
    assert "unknown" in refusal(limited, "/", "")
    assert "unknown" in refusal(limited, "/", "not-an-address")
