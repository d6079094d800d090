"""CloudWatch alarms on what users feel: API 5xx answers, and throttled functions.

Throttles mean the account's concurrency ran out (requests fail, agents skip a tick). Alarms are
always created (visible in the console); they notify only when an SNS topic is configured
(`alarmTopic`, or `alarmEmail` which implies it).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.api import Api
from infra.functions import Deployed
from infra.settings import Settings

PERIOD_S = 300


def build(s: Settings, api: Api, fns: dict[str, Deployed]) -> aws.sns.Topic | None:
    topic = None
    if s.alarm_topic:
        topic = aws.sns.Topic("alarms", name=f"{s.prefix}-alarms")
        if s.alarm_email:
            aws.sns.TopicSubscription("alarms-email", topic=topic.arn, protocol="email", endpoint=s.alarm_email)
    actions = [topic.arn] if topic else []

    aws.cloudwatch.MetricAlarm(
        "api-5xx",
        name=f"{s.prefix}-api-5xx",
        alarm_description="Postbox API answered 5xx (function errors, timeouts, integration failures)",
        namespace="AWS/ApiGateway",
        metric_name="5xx",
        dimensions={"ApiId": api.api.id},
        statistic="Sum",
        period=PERIOD_S,
        evaluation_periods=1,
        threshold=s.alarm_5xx_threshold,
        comparison_operator="GreaterThanOrEqualToThreshold",
        treat_missing_data="notBreaching",
        alarm_actions=actions,
        ok_actions=actions,
    )
    for name, deployed in fns.items():
        aws.cloudwatch.MetricAlarm(
            f"throttles-{name}",
            name=pulumi.Output.concat(deployed.function.name, "-throttles"),
            alarm_description=f"Lambda {name} was throttled",
            namespace="AWS/Lambda",
            metric_name="Throttles",
            dimensions={"FunctionName": deployed.function.name},
            statistic="Sum",
            period=PERIOD_S,
            evaluation_periods=1,
            threshold=1,
            comparison_operator="GreaterThanOrEqualToThreshold",
            treat_missing_data="notBreaching",
            alarm_actions=actions,
            ok_actions=actions,
        )
    return topic
