"""The surfaces' metrics, read from their request lines: one CloudWatch metric filter per surface and
per metric its handler module counts (`add_metric(name=...)`, found as the dashboard finds them).

A surface's request writes one short line with what it counted (`"MessagesSent":10`, and its
`service`; see `functions.request_record`) instead of an EMF record, whose directive alone would
double the bytes of every request. Each filter publishes that count to the namespace Postbox with
the dimension `service`, the metric the dashboard and the tenants' table read. Agents still write
EMF records.
"""

from __future__ import annotations

import pulumi_aws as aws

from functions import routes as route_table
from infra.alarms import NAMESPACE
from infra.dashboard import emitted
from infra.functions import Deployed


def build(fns: dict[str, Deployed]) -> list[aws.cloudwatch.LogMetricFilter]:
    out = []
    for surface, handler in route_table.FUNCTIONS.items():
        service, names = emitted(handler)
        for name in names if service else ():
            out.append(aws.cloudwatch.LogMetricFilter(
                f"metric-{surface}-{name}",
                name=f"{service}-{name}",
                log_group_name=fns[surface].log_group.name,
                pattern=f"{{ $.{name} >= 0 }}",  # a request line that counted it (numbers only)
                metric_transformation=aws.cloudwatch.LogMetricFilterMetricTransformationArgs(
                    name=name, namespace=NAMESPACE, value=f"$.{name}", dimensions={"service": "$.service"},
                ),
            ))
    return out
