"""The work surface's rate limiter: a token bucket per tenant, the plan's limit read once a minute."""

from __future__ import annotations

from postbox.work.ratelimit import Limiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_a_minute_of_requests_then_refuses_until_it_refills():
    clock, reads = Clock(), []
    limiter = Limiter(read_limit=lambda t: reads.append(t) or 60, clock=clock)
    answers = [limiter.check("t1") for _ in range(61)]
    assert [a.allowed for a in answers] == [True] * 60 + [False]
    assert answers[0].remaining == 59 and answers[-1].retry_after_s == 1
    assert answers[-1].headers()["Retry-After"] == "1" and answers[-1].headers()["X-RateLimit-Limit"] == "60"
    clock.now += 1.0  # one request a second comes back
    assert limiter.check("t1").allowed and not limiter.check("t1").allowed
    assert limiter.check("t2").allowed  # each tenant has its own bucket
    assert reads == ["t1", "t2"]  # the plan is read once per tenant, not per request


def test_plan_limit_is_read_again_after_its_ttl_and_zero_means_unlimited():
    clock, limits = Clock(), {"t": 0}
    limiter = Limiter(read_limit=lambda t: limits[t], clock=clock)
    assert all(limiter.check("t").allowed for _ in range(10_000))
    assert limiter.check("t").headers() == {}
    limits["t"] = 1
    clock.now += 61
    assert limiter.check("t").allowed and not limiter.check("t").allowed
