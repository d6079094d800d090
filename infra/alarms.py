"""CloudWatch alarms, all notifying one SNS topic an operator subscribes to (`alarmEmail`, or any
subscription added to the exported `alarm_topic_arn`).

What they watch, derived from the route and schedule tables:
* the API answering 5xx;
* every function's errors and throttles (throttles mean requests failed or an agent skipped a tick);
* agent runs that failed for good (a message in the agent failures queue);
* each cell's database: CPU, capacity (ACU) near its maximum, connections (the first cell's alarms
  under the names they had before cells, later cells' `<prefix>-<cell>-db-...`);
* each cell's RDS Proxy sessions pinned (the design keeps them at zero: see docs/architecture.md);
  a cell in another region has these in its region, notifying a topic there (`_regional_topic`);
* back-pressure: how long the oldest deliverable message of a queue with a consumer has waited.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from functions import schedules as agent_table
from infra.access import AGENT, CONSUMER_DISPATCH, MIGRATE
from infra.api import Api
from infra.cells import Cell
from infra.functions import Deployed
from infra.settings import Settings

PERIOD_S = 300
NAMESPACE = "Postbox"  # functions.observability: the metrics' namespace (EMF records)
OLDEST_MESSAGE_METRIC = "ConsumerOldestMessageAge"  # emitted by the consumer-dispatch agent


def build(s: Settings, api: Api | None, fns: dict[str, Deployed], cells: list[Cell],
          failures: aws.sqs.Queue) -> aws.sns.Topic:
    topic = aws.sns.Topic("alarms", name=f"{s.prefix}-alarms")
    if s.alarm_email:
        aws.sns.TopicSubscription("alarms-email", topic=topic.arn, protocol="email", endpoint=s.alarm_email)
    actions = [topic.arn]

    def alarm(resource: str, name: pulumi.Input[str], description: str, namespace: str, metric: str,
              dimensions: dict, threshold: float, *, statistic: str = "Sum", periods: int = 1,
              notify: list[pulumi.Input[str]] = actions, opts: pulumi.ResourceOptions | None = None) -> None:
        aws.cloudwatch.MetricAlarm(
            resource,
            name=name,
            alarm_description=description,
            namespace=namespace,
            metric_name=metric,
            dimensions=dimensions,
            statistic=statistic,
            period=PERIOD_S,
            evaluation_periods=periods,
            threshold=threshold,
            comparison_operator="GreaterThanOrEqualToThreshold",
            treat_missing_data="notBreaching",
            alarm_actions=notify,
            ok_actions=notify,
            opts=opts,
        )

    if api is not None:  # behind function URLs, each surface's errors alarm below is the API's
        alarm("api-5xx", f"{s.prefix}-api-5xx",
              "Postbox API answered 5xx (function errors, timeouts, integration failures)",
              "AWS/ApiGateway", "5xx", {"ApiId": api.api.id}, s.alarm_5xx_threshold)
    for name, deployed in fns.items():
        fn = deployed.function
        # An agent or migration error is always news; a surface gets the API's threshold.
        errors_at = 1 if deployed.spec.kind in (AGENT, MIGRATE) else s.alarm_5xx_threshold
        alarm(f"errors-{name}", pulumi.Output.concat(fn.name, "-errors"), f"Lambda {name} failed",
              "AWS/Lambda", "Errors", {"FunctionName": fn.name}, errors_at)
        alarm(f"throttles-{name}", pulumi.Output.concat(fn.name, "-throttles"), f"Lambda {name} was throttled",
              "AWS/Lambda", "Throttles", {"FunctionName": fn.name}, 1)
    alarm("agent-failures", f"{s.prefix}-agent-failures", "An agent run failed after its retries, or a schedule "
          "could not invoke its agent: read the message in the agent failures queue",
          "AWS/SQS", "ApproximateNumberOfMessagesVisible", {"QueueName": failures.name}, 1, statistic="Maximum")

    for cell in cells:
        db, prefix = cell.db, cell.physical
        of = "" if cell.first else f" (cell {cell.spec.name})"
        cluster = {"DBClusterIdentifier": db.cluster.cluster_identifier}
        # A cell in another region: its metrics are there, and an alarm only notifies a topic of its own region.
        there = {"notify": [_regional_topic(s, cell).arn], "opts": cell.in_region()} if cell.provider else {}
        alarm(cell.logical("db-cpu"), f"{prefix}-db-cpu", f"Aurora CPU high for 15 minutes{of}", "AWS/RDS",
              "CPUUtilization", cluster, s.alarm_db_cpu_percent, statistic="Average", periods=3, **there)
        alarm(cell.logical("db-acu"), f"{prefix}-db-acu",
              "Aurora capacity near dbMaxAcu for 15 minutes: raise it or find the load" if cell.first else
              f"Aurora capacity near its maxAcu for 15 minutes{of}: raise it, find the load or move tenants off",
              "AWS/RDS", "ServerlessDatabaseCapacity", cluster, round(cell.spec.max_acu * 0.9, 2), statistic="Average",
              periods=3, **there)
        alarm(cell.logical("db-connections"), f"{prefix}-db-connections", f"Aurora connections high{of}", "AWS/RDS",
              "DatabaseConnections", cluster, s.alarm_db_connections, statistic="Maximum", **there)
        alarm(cell.logical("proxy-pinned"), f"{prefix}-proxy-pinned", f"RDS Proxy sessions pinned{of}: something "
              "holds session state (LISTEN, an advisory lock, SET) through the proxy", "AWS/RDS",
              "DatabaseConnectionsCurrentlySessionPinned", {"ProxyName": db.proxy.name}, s.alarm_pinned_connections,
              statistic="Maximum", periods=2, **there)
    if any(a.name == CONSUMER_DISPATCH for a in agent_table.AGENTS):
        alarm("consumer-backlog", f"{s.prefix}-consumer-backlog", "A queue's consumer falls behind: its oldest "
              "deliverable message waited too long", NAMESPACE, OLDEST_MESSAGE_METRIC,
              {"service": CONSUMER_DISPATCH}, s.alarm_oldest_message_seconds, statistic="Maximum", periods=2)
    return topic


def _regional_topic(s: Settings, cell: Cell) -> aws.sns.Topic:
    """The alarms topic of a cell in another region, `<prefix>-<cell>-alarms` there (the stack's
    `cells` output names it), with the stack's `alarmEmail` subscribed too."""
    cell.alarm_topic = aws.sns.Topic(cell.logical("alarms"), name=f"{cell.physical}-alarms", opts=cell.in_region())
    if s.alarm_email:
        aws.sns.TopicSubscription(cell.logical("alarms-email"), topic=cell.alarm_topic.arn, protocol="email",
                                  endpoint=s.alarm_email, opts=cell.in_region())
    return cell.alarm_topic
