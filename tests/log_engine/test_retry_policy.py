"""The one retry vocabulary: a policy's decisions, the wire names mapped onto it, and the triage of
ordering-unit heads that keyed streams apply at claim time."""

from __future__ import annotations

import uuid

from postbox.log_engine.leases import parse_receipts, receipt, triage
from postbox.log_engine.retry import RetryDecision, RetryPolicy


def test_retries_until_max_attempts_failed_then_dead_letters():
    policy = RetryPolicy(max_attempts=3, retry_delay_ms=250)
    assert [policy.decide(n) for n in (1, 2, 3, 4)] == [
        RetryDecision(False, 1, 250), RetryDecision(False, 2, 250), RetryDecision(True, 3), RetryDecision(True, 4)]


def test_a_nack_names_its_own_delay():
    assert RetryPolicy(5, 1000).decide(1, delay_ms=0) == RetryDecision(False, 1, 0)


def test_no_max_attempts_retries_for_ever():
    assert not RetryPolicy(None).decide(10_000).dead_letter


def test_a_retry_limit_counts_retries_after_the_first_delivery():
    policy = RetryPolicy.from_retry_limit(2, 10)
    assert (policy.max_attempts, policy.retry_delay_ms) == (3, 10)
    assert RetryPolicy.from_retry_limit(0).decide(1).dead_letter  # retryLimit 0: the first failure is final


def test_triage_delivers_live_heads_dead_letters_exhausted_ones_and_drops_gone_ones():
    heads = [("k:a", 1, 0, False), ("k:b", 2, 2, False), ("k:c", 3, 1, True), ("m:4", 4, 1, False)]
    decided = triage(heads, RetryPolicy(2))
    assert decided.deliver == {"k:a": 1, "m:4": 4}
    assert (decided.dead, decided.gone, decided.again) == ([2], [3], ["k:b", "k:c"])


def test_receipts_round_trip_and_a_malformed_one_is_refused():
    token = uuid.uuid4()
    assert parse_receipts([receipt(42, token)]) == [(42, token)]
    assert parse_receipts([receipt(1, token), "nope"]) is None
