"""The schedule table: every system agent and how often it runs.

Read by the Pulumi program (one EventBridge schedule per row), by the local scheduler of
`postbox dev`, and by the tests. Each agent is a bounded sweep that is safe to run twice at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Agent:
    name: str
    handler: str  # module.function inside the `functions` package
    every_seconds: int
    description: str
    local_every_seconds: int | None = None  # `postbox dev` may run an agent more often than AWS can

    @property
    def local_period(self) -> int:
        return self.local_every_seconds or self.every_seconds

    @property
    def schedule_expression(self) -> str:
        """The EventBridge `rate(...)` expression for this agent."""
        if self.every_seconds % 60:
            raise ValueError(f"{self.name}: EventBridge rates are whole minutes")
        minutes = self.every_seconds // 60
        return f"rate({minutes} minute{'s' if minutes != 1 else ''})"


AGENTS: tuple[Agent, ...] = (
    Agent(
        "queue-retention",
        "functions.agents.queue_retention.handler",
        300,
        "Deletes archived queue messages older than their queue's retention, and waiting messages older than"
        " their SQS MessageRetentionPeriod, in bounded batches.",
    ),
    Agent(
        "consumer-dispatch",
        "functions.agents.consumer_dispatch.handler",
        60,
        "Delivers queue messages to their consumer functions in batches, honouring concurrency.",
        local_every_seconds=2,
    ),
    Agent(
        "keyed-streams-schedules",
        "functions.agents.keyed_streams_schedules.handler",
        60,
        "Makes due scheduled stream messages available and marks expired ones, in bounded batches.",
        local_every_seconds=1,
    ),
    Agent(
        "keyed-streams-retention",
        "functions.agents.keyed_streams_retention.handler",
        300,
        "Removes stream messages older than their stream's retention (index rows and log segments).",
        local_every_seconds=30,
    ),
    Agent(
        "durable-expiry",
        "functions.agents.durable_expiry.handler",
        60,
        "Removes durable streams past their Stream-TTL or Stream-Expires-At (soft-deletes those forks read).",
        local_every_seconds=10,
    ),
    Agent(
        "partitioned-maintenance",
        "functions.agents.partitioned_maintenance.handler",
        60,
        "Partitioned queues: releases expired leases (dead-letters past the retry limit) and drops"
        " segments past retention.",
        local_every_seconds=5,
    ),
    Agent(
        "flows-hosted",
        "functions.agents.flows_hosted.handler",
        60,
        "Streaming queries hosted as a function: folds what waits and idle-flushes ripe windows of"
        " partitions that went quiet, even when no worker is up.",
        local_every_seconds=5,
    ),
    Agent(
        "work-visibility-timeout",
        "functions.agents.work.visibility_timeout",
        60,
        "Work surface: claims whose visibility timeout ran out go back to pending (or to the dead"
        " letter after their last attempt). Claims recover their own queue first, so nothing waits on it.",
        local_every_seconds=1,
    ),
    Agent(
        "work-expiry",
        "functions.agents.work.expiry",
        60,
        "Work surface: pending or claimed messages past their ttl_seconds or deadline end as expired.",
        local_every_seconds=5,
    ),
    Agent(
        "work-priority-aging",
        "functions.agents.work.priority_aging",
        60,
        "Work surface: waiting messages of priority queues rise about one tier per ten minutes, up to"
        " the top of the high tier.",
        local_every_seconds=10,
    ),
    Agent(
        "work-dead-letter-monitor",
        "functions.agents.work.dead_letter_monitor",
        60,
        "Work surface: one alert event per scope whose dead-letter depth reaches its threshold.",
        local_every_seconds=30,
    ),
    Agent(
        "work-archiver",
        "functions.agents.work.archiver",
        300,
        "Work surface: deletes ended messages past their scope's retention, in bounded batches.",
        local_every_seconds=60,
    ),
    Agent(
        "work-journal",
        "functions.agents.work.journal",
        60,
        "Work surface: folds the journal's rows into the queues' counters (reads add what is not folded"
        " yet, so depths stay exact) and makes the journal's weekly partitions four weeks ahead.",
        local_every_seconds=1,
    ),
    Agent(
        "work-push-delivery",
        "functions.agents.work.push_delivery",
        60,
        "Work surface: POSTs the deliveries of push subscriptions to their URLs, HMAC-SHA256 signed;"
        " a 2xx within 10 s completes one, anything else retries it with backoff.",
        local_every_seconds=1,
    ),
    Agent(
        "work-auto-claim",
        "functions.agents.work.auto_claim",
        60,
        "Work surface: claims the waiting deliveries of auto_claim subscriptions for their"
        " subscribers, within max_in_flight, as earlier claims end or run out.",
        local_every_seconds=1,
    ),
    Agent(
        "work-gdpr",
        "functions.agents.work_gdpr.handler",
        60,
        "Work surface: works through GDPR erasure and export jobs in bounded batches (500 rows each),"
        " resumable; writes finished exports and removes expired ones.",
        local_every_seconds=1,
    ),
    Agent(
        "sqs-move-tasks",
        "functions.agents.sqs_move_tasks.handler",
        60,
        "SQS: moves the messages of running message move tasks (dead-letter redrives) at each task's"
        " MaxNumberOfMessagesPerSecond, for up to 50 s a run, in batches of one transaction each.",
        local_every_seconds=1,
    ),
    Agent(
        "history",
        "functions.agents.history.handler",
        60,
        "Console charts: records each queue's, work queue's, partitioned queue's and keyed stream's"
        " messages in and out, depth and oldest message's age once a minute; deletes records over a day old.",
    ),
    # (each surface adds its agents above this line)
)
