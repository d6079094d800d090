"""One EventBridge Scheduler schedule per row of `functions.schedules.AGENTS`.

Scheduler (not CloudWatch Events rules) because it invokes through a role we scope to exactly the
one agent function, and it has no per-account rule limits to run into. The schedule retries an
invoke that fails (throttled, the function being updated) within the period, and an invoke that
never happens lands in the agent failures queue; a run that fails is the function's own
asynchronous retry and on-failure destination (infra/functions.py).

One schedule per agent and cell, the cell's child, its input naming the cell on a stack with
`cells:` (`{"agent": ..., "cell": ...}`: the run works on that cell alone, so a slow cell never
holds up another's sweep); one role per agent invokes them all.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from functions import schedules as agent_table
from infra import cells as cell_parts
from infra.cells import Cell
from infra.functions import Deployed
from infra.settings import Settings

RETRIES = 3  # invoke attempts the schedule retries within one period


def build(s: Settings, fns: dict[str, Deployed], failures: aws.sqs.Queue, cells: list[Cell]
          ) -> list[aws.scheduler.Schedule]:
    account = aws.get_caller_identity_output().account_id
    schedules = []
    groups = {cell.spec.name: cell_parts.schedule_group(s, cell) for cell in cells}
    for agent in agent_table.AGENTS:
        fn = fns[agent.name].function
        role = aws.iam.Role(
            f"scheduler-{agent.name}",
            description=f"EventBridge Scheduler: invoke the {agent.name} agent",
            assume_role_policy=account.apply(
                lambda acct: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "scheduler.amazonaws.com"},
                                "Action": "sts:AssumeRole",
                                "Condition": {"StringEquals": {"aws:SourceAccount": acct}},
                            }
                        ],
                    }
                )
            ),
        )
        aws.iam.RolePolicy(
            f"scheduler-{agent.name}",
            role=role.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "InvokeAgent",
                            "Effect": "Allow",
                            "Action": ["lambda:InvokeFunction"],
                            "Resource": [fn.arn, pulumi.Output.concat(fn.arn, ":*")],
                        },
                        {
                            "Sid": "DeadLetter",
                            "Effect": "Allow",
                            "Action": ["sqs:SendMessage"],
                            "Resource": failures.arn,
                        },
                    ],
                }
            ),
        )
        for cell in cells:
            group = groups[cell.spec.name]
            schedules.append(
                aws.scheduler.Schedule(
                    cell.logical(f"schedule-{agent.name}"),
                    name=f"{s.prefix}-{agent.name}"[:64],
                    group_name=group.name if group is not None else None,
                    description=agent.description[:512],
                    schedule_expression=agent.schedule_expression,
                    flexible_time_window=aws.scheduler.ScheduleFlexibleTimeWindowArgs(mode="OFF"),
                    state="ENABLED" if s.agents_enabled else "DISABLED",
                    target=aws.scheduler.ScheduleTargetArgs(
                        arn=fn.arn,
                        role_arn=role.arn,
                        input=json.dumps({"agent": agent.name, **({"cell": cell.spec.name} if s.cells_named else {})}),
                        retry_policy=aws.scheduler.ScheduleTargetRetryPolicyArgs(
                            maximum_retry_attempts=RETRIES, maximum_event_age_in_seconds=max(60, agent.every_seconds)
                        ),
                        dead_letter_config=aws.scheduler.ScheduleTargetDeadLetterConfigArgs(arn=failures.arn),
                    ),
                    opts=cell.opts(),
                )
            )
    return schedules
