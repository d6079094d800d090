"""Runs each agent of the schedule table on its period, as EventBridge would on AWS."""

from __future__ import annotations

import logging
import threading

from functions.local.invoke import entry_point, invoke
from functions.schedules import AGENTS, Agent

log = logging.getLogger("postbox.scheduler")


def scheduled_event(agent: Agent) -> dict:
    return {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {"agent": agent.name}}


class Scheduler:
    def __init__(self, agents: tuple[Agent, ...] = AGENTS, speedup: float = 1.0) -> None:
        self.agents = agents
        self.speedup = speedup
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def _loop(self, agent: Agent) -> None:
        period = agent.local_period / self.speedup
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
