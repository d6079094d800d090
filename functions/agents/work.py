"""Agents of the work surface: visibility timeout, expiry, priority aging, dead-letter monitor,
archiver, journal (bounded sweeps, `postbox.work.sweeps`), push delivery (`postbox.work.push`) and
auto-claim assignment (`postbox.work.assign`), each
recorded in `agent_runs`."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.work import assign, push, sweeps

logger, metrics, lambda_handler = instrument("work-agents")


@lambda_handler
@recorded("work-visibility-timeout")
def visibility_timeout(event: dict, context: Any) -> dict:
    return {"recovered": sweeps.recover_claims()}


@lambda_handler
@recorded("work-expiry")
def expiry(event: dict, context: Any) -> dict:
    return {"expired": sweeps.expire()}


@lambda_handler
@recorded("work-priority-aging")
def priority_aging(event: dict, context: Any) -> dict:
    return {"aged": sweeps.age_priorities()}


@lambda_handler
@recorded("work-dead-letter-monitor")
def dead_letter_monitor(event: dict, context: Any) -> dict:
    return {"alerts": sweeps.watch_dead_letters()}


@lambda_handler
@recorded("work-archiver")
def archiver(event: dict, context: Any) -> dict:
    return {"archived": sweeps.archive()}


@lambda_handler
@recorded("work-journal", count="folded")
def journal(event: dict, context: Any) -> dict:
    return sweeps.keep_journal()


@lambda_handler
@recorded("work-push-delivery")
def push_delivery(event: dict, context: Any) -> dict:
    return {"posted": push.deliver()}


@lambda_handler
@recorded("work-auto-claim")
def auto_claim(event: dict, context: Any) -> dict:
    return {"assigned": assign.assign_due()}
