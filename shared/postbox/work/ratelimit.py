"""The work surface's request limit: the plan's `work_requests_minute`, per tenant (see
`postbox.ratelimit` for how it is counted)."""

from __future__ import annotations

from ..ratelimit import Decision, Limiter, plan_limit

__all__ = ["Decision", "Limiter", "check"]

_limiter = Limiter(plan_limit("work_requests_minute"))


def check(tenant_id: str) -> Decision:
    return _limiter.check(tenant_id)
