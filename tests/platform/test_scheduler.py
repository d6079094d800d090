"""The local scheduler's periods: the schedule table's, or POSTBOX_AGENT_EVERY's where it names an agent."""

from __future__ import annotations

import threading
import time

import pytest

from functions.local import scheduler
from functions.local.scheduler import Scheduler, periods_from
from functions.schedules import AGENTS, Agent


def _agent(name: str) -> Agent:
    return next(a for a in AGENTS if a.name == name)


def test_named_agents_take_the_given_period_and_the_rest_keep_the_tables():
    periods = periods_from(" queue-retention=10, work-archiver=2.5 ,")
    assert periods == {"queue-retention": 10.0, "work-archiver": 2.5}
    s = Scheduler(periods=periods)
    assert s.period(_agent("queue-retention")) == 10.0
    assert s.period(_agent("work-archiver")) == 2.5
    assert s.period(_agent("durable-expiry")) == _agent("durable-expiry").local_period


def test_the_environment_sets_the_periods(monkeypatch):
    monkeypatch.setenv(scheduler.PERIODS_ENV, "queue-retention=7")
    assert Scheduler().period(_agent("queue-retention")) == 7.0
    monkeypatch.delenv(scheduler.PERIODS_ENV)
    assert Scheduler().period(_agent("queue-retention")) == _agent("queue-retention").local_period


@pytest.mark.parametrize(("spec", "named"), [
    ("queue-retentoin=10", "'queue-retentoin'"),
    ("queue-retention=0", "queue-retention's period"),
    ("queue-retention=-5", "queue-retention's period"),
    ("queue-retention=soon", "queue-retention's period"),
    ("queue-retention", "queue-retention's period"),
])
def test_a_typo_is_refused_by_name(spec, named):
    with pytest.raises(ValueError, match=named):
        periods_from(spec)


def test_an_agent_runs_on_the_given_period(monkeypatch):
    runs: list[str] = []
    ran = threading.Event()

    def record(handler: str, event: dict, name: str, timeout_s: float) -> None:
        runs.append(name)
        if len(runs) >= 3:
            ran.set()

    monkeypatch.setattr(scheduler, "invoke", record)
    monkeypatch.setattr(scheduler, "entry_point", lambda dotted: None)
    s = Scheduler(agents=(_agent("queue-retention"),), periods={"queue-retention": 0.05})
    started = time.monotonic()
    s.start()
    try:
        assert ran.wait(5), "the agent did not run three times within 5 s (its table period is 300 s)"
    finally:
        s.stop()
    assert set(runs) == {"queue-retention"} and time.monotonic() - started < 5
