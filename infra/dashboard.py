"""The operator's CloudWatch dashboard, one row per surface and per concern.

Everything comes from the tables and the code: a row per surface of `functions.routes.FUNCTIONS`
(requests, errors, p50/p99 latency, and the messages in and out that its handler module counts,
from the EMF records its requests write), the agents of
`functions.schedules.AGENTS` (runs, errors, what each one did), each cell's database and proxy. The
Postbox metrics are found by reading each handler module's source: the service it passes to
`instrument(...)` (the metrics' `service` dimension) and every `add_metric(name="...")`, so a
metric a module stops emitting leaves the dashboard with it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pulumi
import pulumi_aws as aws

from functions import routes as route_table
from functions import schedules as agent_table
from infra.alarms import NAMESPACE
from infra.api import Api
from infra.artifacts import REPO
from infra.cells import Cell
from infra.settings import Settings

WIDTH = 24
PERIOD_S = 60


def emitted(handler: str) -> tuple[str | None, list[str]]:
    """(service dimension, metric names) the handler's module emits, read from its source."""
    path = REPO / Path(*handler.rsplit(".", 1)[0].split(".")).with_suffix(".py")
    source = path.read_text(encoding="utf-8") if path.exists() else ""
    service = re.search(r'instrument\(\s*"([^"]+)"', source)
    names = list(dict.fromkeys(re.findall(r'add_metric\(\s*name="([^"]+)"', source)))
    return (service.group(1) if service else None), names


def _widget(title: str, metrics: list, region, *, stat: str = "Sum", width: int = 8) -> dict:
    return {
        "type": "metric",
        "width": width,
        "height": 6,
        "properties": {"title": title, "metrics": metrics, "view": "timeSeries", "stat": stat,
                       "period": PERIOD_S, "region": region},
    }


def _lambda(fn: str, metric: str, **options) -> list:
    return ["AWS/Lambda", metric, "FunctionName", fn, *([options] if options else [])]


def _emf(handler: str) -> list:
    service, names = emitted(handler)
    return [[NAMESPACE, name, "service", service] for name in names] if service else []


def tenant_query(s: Settings) -> str:
    """Logs Insights over the surfaces' log groups: each tenant's requests (the weights of its access
    lines: a sampled line stands for 1/rate requests) and every metric the surfaces count (their EMF
    records carry the tenant, sampled or not). Per-tenant figures without a metric per tenant."""
    sources = " | ".join(f"SOURCE '/aws/lambda/{s.prefix}-{name}'" for name in route_table.FUNCTIONS)
    names = list(dict.fromkeys(n for handler in route_table.FUNCTIONS.values() for n in emitted(handler)[1]))
    sums = "".join(f", sum({n}) as {n}" for n in names)
    return (f"{sources} | filter ispresent(tenant)"
            f" | stats sum(weight) as requests{sums} by tenant | sort requests desc | limit 20")


def widgets(s: Settings, api_id, region, failures_queue: str, databases: list[tuple[str, str, str, str]]) -> list[dict]:
    """`databases`: each cell's (name, region, cluster, proxy), the first cell's first."""
    def fn(name: str) -> str:
        return f"{s.prefix}-{name}"

    out = [  # behind function URLs (no API id) each surface's own row below is all there is
        _widget("API: requests and errors", [["AWS/ApiGateway", "Count", "ApiId", api_id],
                                             ["AWS/ApiGateway", "4xx", "ApiId", api_id],
                                             ["AWS/ApiGateway", "5xx", "ApiId", api_id]], region, width=12),
        _widget("API: latency p50 / p99", [["AWS/ApiGateway", "Latency", "ApiId", api_id, {"stat": "p50"}],
                                           ["AWS/ApiGateway", "Latency", "ApiId", api_id, {"stat": "p99"}]],
                region, stat="p99", width=12),
    ] if api_id else []
    for surface, handler in route_table.FUNCTIONS.items():
        out.append(_widget(f"{surface}: requests and errors",
                           [_lambda(fn(surface), "Invocations"), _lambda(fn(surface), "Errors"),
                            _lambda(fn(surface), "Throttles")], region))
        out.append(_widget(f"{surface}: duration p50 / p99",
                           [_lambda(fn(surface), "Duration", stat="p50"), _lambda(fn(surface), "Duration", stat="p99")],
                           region, stat="p99"))
        out.append(_widget(f"{surface}: messages in / out", _emf(handler)
                           or [_lambda(fn(surface), "Invocations")], region))
    out.append({"type": "log", "width": WIDTH, "height": 6,
                "properties": {"title": "tenants: busiest by requests", "query": tenant_query(s),
                               "region": region, "view": "table"}})
    agents = agent_table.AGENTS
    out.append(_widget("agents: runs", [_lambda(fn(a.name), "Invocations") for a in agents], region))
    out.append(_widget("agents: errors", [_lambda(fn(a.name), "Errors") for a in agents]
                       + [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", failures_queue,
                           {"stat": "Maximum"}]], region))
    out.append(_widget("agents: work done", [m for a in agents for m in _emf(a.handler)], region))
    for name, where, cluster, proxy in databases:
        out += _database_widgets(f"database {name}" if len(databases) > 1 else "database",
                                 f"proxy {name}" if len(databases) > 1 else "proxy", where, cluster, proxy)
    return out


def _database_widgets(database: str, proxy_title: str, region, cluster_id: str, proxy: str) -> list[dict]:
    """One cell's cluster and proxy, in the cell's region."""
    cluster = ["DBClusterIdentifier", cluster_id]
    return [
        _widget(f"{database}: capacity (ACU) and CPU",
                [["AWS/RDS", "ServerlessDatabaseCapacity", *cluster], ["AWS/RDS", "CPUUtilization", *cluster]],
                region, stat="Average"),
        _widget(f"{database}: connections", [["AWS/RDS", "DatabaseConnections", *cluster]], region, stat="Maximum"),
        _widget(f"{proxy_title}: clients, database connections, pinned",
                [["AWS/RDS", "ClientConnections", "ProxyName", proxy],
                 ["AWS/RDS", "DatabaseConnections", "ProxyName", proxy],
                 ["AWS/RDS", "DatabaseConnectionsCurrentlySessionPinned", "ProxyName", proxy]],
                region, stat="Maximum"),
    ]


def build(s: Settings, api: Api | None, stack_cells: list[Cell], failures: aws.sqs.Queue) -> aws.cloudwatch.Dashboard:
    """The dashboard, with every cell's database and proxy (a stack of one cell: its rows as before cells)."""
    region = aws.get_region_output().region
    api_id = api.api.id if api else ""
    databases = [pulumi.Output.all(c.spec.region or region, c.db.cluster.cluster_identifier, c.db.proxy.name).apply(
                     lambda a, name=c.spec.name: (name, *a)) for c in stack_cells]
    body = pulumi.Output.all(api_id, region, failures.name, pulumi.Output.all(*databases)).apply(
        lambda a: pulumi.Output.json_dumps({"widgets": widgets(s, *a)})
    )
    return aws.cloudwatch.Dashboard("dashboard", dashboard_name=s.prefix, dashboard_body=body)
