"""Runs each agent of the schedule table on its period, as EventBridge would on AWS."""

from __future__ import annotations

import logging
import os
import threading

from functions.local.invoke import entry_point, invoke
from functions.schedules import AGENTS, Agent

log = logging.getLogger("postbox.scheduler")

PERIODS_ENV = "POSTBOX_AGENT_EVERY"


def scheduled_event(agent: Agent) -> dict:
    return {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {"agent": agent.name}}


def periods_from(spec: str, agents: tuple[Agent, ...] = AGENTS) -> dict[str, float]:
    """Local periods by agent name from `name=seconds,name=seconds` (POSTBOX_AGENT_EVERY), so a
    soak run sees retention cycle within minutes. An unknown name or a period that is not a
    positive number is refused by name: a typo would otherwise leave the table's period in force."""
    known = {a.name for a in agents}
    periods: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, seconds = part.partition("=")
        name = name.strip()
        if name not in known:
            raise ValueError(f"{PERIODS_ENV}: no agent named {name!r}")
        try:
            period = float(seconds)
        except ValueError:
            period = 0.0
        if not period > 0:
            raise ValueError(f"{PERIODS_ENV}: {name}'s period must be a positive number of seconds, not {seconds!r}")
        periods[name] = period
    return periods


class Scheduler:
    def __init__(self, agents: tuple[Agent, ...] = AGENTS, speedup: float = 1.0,
                 periods: dict[str, float] | None = None) -> None:
        self.agents = agents
        self.speedup = speedup
        self.periods = periods if periods is not None else periods_from(os.environ.get(PERIODS_ENV, ""), agents)
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def period(self, agent: Agent) -> float:
        return self.periods.get(agent.name, agent.local_period) / self.speedup

    def _loop(self, agent: Agent) -> None:
        period = self.period(agent)
        while not self.stopping.wait(period):
            try:
                result = invoke(agent.handler, scheduled_event(agent), agent.name, timeout_s=period)
                log.debug("%s: %s", agent.name, result)
            except Exception:
                log.exception("agent %s failed", agent.name)

    def start(self) -> None:
        # Each agent's handler imported here, one after the other, before any thread runs one: agent
        # threads importing the same modules at once could meet in an import cycle and deadlock
        # (Python raises _DeadlockError in one of them).
        for agent in self.agents:
            entry_point(agent.handler)
        for agent in self.agents:
            t = threading.Thread(target=self._loop, args=(agent,), name=f"agent-{agent.name}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=5)
