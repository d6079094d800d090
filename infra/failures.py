"""Where failed agent runs go: one SQS queue, so no failure is silent.

An agent's asynchronous invocation that still fails after its retries (the Lambda on-failure
destination), and a schedule that could not invoke its agent at all (EventBridge Scheduler's
dead-letter queue), both leave a message here; an alarm fires on the first one.
"""

from __future__ import annotations

import pulumi_aws as aws

from infra.settings import Settings

RETENTION_S = 14 * 24 * 3600  # the SQS maximum: two weeks to look at a failure


def build(s: Settings) -> aws.sqs.Queue:
    return aws.sqs.Queue(
        "agent-failures",
        name=f"{s.prefix}-agent-failures",
        message_retention_seconds=RETENTION_S,
        sqs_managed_sse_enabled=True,
    )
