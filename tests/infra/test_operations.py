"""The stack's operations side under Pulumi mocks: deploy order, alarms, agent failure destinations,
reserved concurrency, secrets and their rotation, and a dashboard whose widgets name real metrics."""

from __future__ import annotations

import json
import re

import pulumi_aws as aws
import pytest
from stack_harness import ACCOUNT, REGION, REPO, StackRun, run_stack

from functions import routes as route_table
from functions import schedules as agent_table

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")

FUNCTION = "aws:lambda/function:Function"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def alarms(run: StackRun) -> list[dict]:
    return [a.inputs for a in run.of_type(ALARM)]


def all_function_names(run: StackRun) -> set[str]:
    return {f.inputs["name"] for f in run.of_type(FUNCTION)}


# --- deploy order ------------------------------------------------------------------------------


@pytest.mark.parametrize("cells", [None, [{"name": "cell-1"}, {"name": "east"}]], ids=["one-cell", "two-cells"])
def test_every_function_but_migrate_waits_for_the_migration_run(monkeypatch, cells):
    """New code never meets an old schema: each function's create/update depends on the invocation
    of the migrate function on every cell (which itself depends on the migrate function and the
    cell's database)."""
    import infra.migrate

    seen: dict[str, list] = {}
    invocations: list = []
    original_fn = aws.lambda_.Function.__init__
    original_build = infra.migrate.build

    def record_fn(self, resource_name, *args, opts=None, **kwargs):
        seen[resource_name] = list((opts.depends_on or []) if opts else [])
        original_fn(self, resource_name, *args, opts=opts, **kwargs)

    def record_build(fn, cell, named):
        invocations.append(original_build(fn, cell, named))
        return invocations[-1]

    monkeypatch.setattr(aws.lambda_.Function, "__init__", record_fn)
    monkeypatch.setattr(infra.migrate, "build", record_build)
    run = run_stack("prod", {"cells": cells} if cells else None)
    assert len(invocations) == len(cells or [None])
    assert len(run.of_type("aws:lambda/invocation:Invocation")) == len(invocations)
    assert set(seen) == {f"fn-{n}" for n in (*route_table.FUNCTIONS, "migrate",
                                            *(a.name for a in agent_table.AGENTS))}
    for name, depends_on in seen.items():
        for invocation in invocations:
            assert (invocation in depends_on) == (name != "fn-migrate"), name


# --- silent failures ---------------------------------------------------------------------------


def test_errors_and_throttles_alarm_for_every_function_of_the_tables(prod: StackRun):
    names = all_function_names(prod)
    assert len(names) == len(route_table.FUNCTIONS) + len(agent_table.AGENTS) + 1  # and migrate; no authorizer
    for metric in ("Errors", "Throttles"):
        watched = {a["dimensions"]["FunctionName"] for a in alarms(prod) if a["metricName"] == metric}
        assert watched == names, metric
    agent_errors = [a for a in alarms(prod) if a["metricName"] == "Errors"
                    and a["dimensions"]["FunctionName"].removeprefix("postbox-prod-") in
                    {a.name for a in agent_table.AGENTS}]
    assert agent_errors and all(a["threshold"] == 1 for a in agent_errors)


def test_every_alarm_notifies_the_one_topic(prod: StackRun):
    (topic,) = prod.of_type("aws:sns/topic:Topic")
    assert not prod.of_type("aws:sns/topicSubscription:TopicSubscription")  # subscribed by config or by hand
    for alarm in alarms(prod):
        assert alarm["alarmActions"] == [topic.outputs["arn"]] == alarm["okActions"]
        assert alarm["comparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert prod.exports["alarm_topic_arn"] == topic.outputs["arn"]


def by_metric(run: StackRun, namespace: str, metric: str) -> dict:
    (alarm,) = [a for a in alarms(run) if a["namespace"] == namespace and a["metricName"] == metric]
    return alarm


def test_database_proxy_and_back_pressure_alarms(prod: StackRun):
    cluster = {"DBClusterIdentifier": "postbox-prod"}
    cpu = by_metric(prod, "AWS/RDS", "CPUUtilization")
    assert (cpu["dimensions"], cpu["threshold"], cpu["statistic"]) == (cluster, 80, "Average")
    acu = by_metric(prod, "AWS/RDS", "ServerlessDatabaseCapacity")
    assert (acu["dimensions"], acu["threshold"]) == (cluster, 3.6)  # 90 % of dbMaxAcu 4
    connections = by_metric(prod, "AWS/RDS", "DatabaseConnections")
    assert (connections["dimensions"], connections["threshold"]) == (cluster, 400)
    pinned = by_metric(prod, "AWS/RDS", "DatabaseConnectionsCurrentlySessionPinned")
    assert pinned["dimensions"] == {"ProxyName": "postbox-prod"} and pinned["threshold"] == 5
    backlog = by_metric(prod, "Postbox", "ConsumerOldestMessageAge")
    assert backlog["dimensions"] == {"service": "consumer-dispatch"}
    assert (backlog["statistic"], backlog["threshold"]) == ("Maximum", 300)
    api = by_metric(prod, "AWS/ApiGateway", "5xx")
    assert api["dimensions"] == {"ApiId": "api123"}


def test_alarm_thresholds_come_from_config():
    run = run_stack("prod", {"alarmDbCpuPercent": 60, "alarmOldestMessageSeconds": 90, "dbMaxAcu": 10,
                             "alarmPinnedConnections": 1})
    assert by_metric(run, "AWS/RDS", "CPUUtilization")["threshold"] == 60
    assert by_metric(run, "AWS/RDS", "ServerlessDatabaseCapacity")["threshold"] == 9
    assert by_metric(run, "AWS/RDS", "DatabaseConnectionsCurrentlySessionPinned")["threshold"] == 1
    assert by_metric(run, "Postbox", "ConsumerOldestMessageAge")["threshold"] == 90


def test_failed_agent_runs_land_in_one_queue_that_alarms(prod: StackRun):
    queue = prod.one("aws:sqs/queue:Queue", "agent-failures")
    assert queue.inputs["sqsManagedSseEnabled"] is True
    configs = {c.inputs["functionName"]: c.inputs for c in prod.of_type(
        "aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig")}
    assert set(configs) == {f"postbox-prod-{a.name}" for a in agent_table.AGENTS}
    for config in configs.values():
        assert config["maximumRetryAttempts"] == 2
        assert config["destinationConfig"] == {"onFailure": {"destination": queue.outputs["arn"]}}
    depth = by_metric(prod, "AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert depth["dimensions"] == {"QueueName": "postbox-prod-agent-failures"} and depth["threshold"] == 1
    # Each agent's role may send its failures there (Lambda destinations use the function's role).
    from test_stack import lambda_role_policies, statements

    for name, policy in lambda_role_policies(prod).items():
        sends = [st for st in statements(policy) if st["Action"] == ["sqs:SendMessage"]]
        if name in {a.name for a in agent_table.AGENTS}:
            assert [st["Resource"] for st in sends] == [queue.outputs["arn"]], name
        else:
            assert not sends, name


def test_reserved_concurrency_caps_agents_and_optionally_surfaces(prod: StackRun):
    fns = {f.inputs["name"].removeprefix("postbox-prod-"): f.inputs for f in prod.of_type(FUNCTION)}
    for agent in agent_table.AGENTS:
        expected = 10 if agent.name == "consumer-dispatch" else 2
        assert fns[agent.name]["reservedConcurrentExecutions"] == expected, agent.name
    for surface in route_table.FUNCTIONS:
        assert fns[surface]["reservedConcurrentExecutions"] == -1
    run = run_stack("prod", {"apiReservedConcurrency": 50, "agentReservedConcurrency": 1})
    capped = {f.inputs["name"].removeprefix("postbox-prod-"): f.inputs["reservedConcurrentExecutions"]
              for f in run.of_type(FUNCTION)}
    assert all(capped[s] == 50 for s in route_table.FUNCTIONS)
    assert capped["queue-retention"] == 1


# --- secrets -----------------------------------------------------------------------------------


def test_secrets_have_no_value_in_the_stack_and_rotate_through_migrate(prod: StackRun):
    secrets = {s.name: s for s in prod.of_type("aws:secretsmanager/secret:Secret")}
    assert set(secrets) == {"db-app", "encryption-keys"}
    assert not prod.of_type("aws:secretsmanager/secretVersion:SecretVersion")  # the migrate run fills them
    migrate_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:postbox-prod-migrate"
    rotations = {r.inputs["secretId"]: r.inputs for r in prod.of_type(
        "aws:secretsmanager/secretRotation:SecretRotation")}
    assert set(rotations) == {s.id for s in secrets.values()}
    assert rotations[secrets["db-app"].id]["rotationRules"] == {"automaticallyAfterDays": 30}
    assert rotations[secrets["encryption-keys"].id]["rotationRules"] == {"automaticallyAfterDays": 90}
    assert {r["rotationLambdaArn"] for r in rotations.values()} == {migrate_arn}
    (allowed,) = [p.inputs for p in prod.of_type("aws:lambda/permission:Permission")
                  if p.inputs["principal"] == "secretsmanager.amazonaws.com"]
    assert allowed["function"] == "postbox-prod-migrate"
    (cluster,) = prod.of_type("aws:rds/cluster:Cluster")
    assert cluster.inputs["iamDatabaseAuthenticationEnabled"] is True


# --- dashboard ---------------------------------------------------------------------------------


def dashboard_metrics(run: StackRun) -> list[list]:
    (board,) = run.of_type("aws:cloudwatch/dashboard:Dashboard")
    body = json.loads(board.inputs["dashboardBody"])
    return [m for w in body["widgets"] for m in w["properties"].get("metrics", [])], body["widgets"]


def emitted_by_code() -> dict[str, set[str]]:
    """service -> metric names, from every Lambda module in functions/ (instrument(...) + add_metric)."""
    out: dict[str, set[str]] = {}
    for path in (REPO / "functions").rglob("*.py"):
        source = path.read_text()
        service = re.search(r'instrument\(\s*"([^"]+)"[,)]', source)
        if service:
            out.setdefault(service.group(1), set()).update(re.findall(r'add_metric\(\s*name="([^"]+)"', source))
    return out


def test_dashboard_widgets_name_real_metrics(prod: StackRun):
    metrics, widgets = dashboard_metrics(prod)
    emitted = emitted_by_code()
    names = all_function_names(prod)
    seen_emf = set()
    for m in metrics:
        namespace, metric, dims = m[0], m[1], [x for x in m[2:] if not isinstance(x, dict)]
        dims = dict(zip(dims[::2], dims[1::2], strict=True))
        if namespace == "Postbox":  # what functions.observability emits: one `service` dimension
            assert set(dims) == {"service"}, m
            assert metric in emitted[dims["service"]], m
            seen_emf.add((dims["service"], metric))
        elif namespace == "AWS/Lambda":
            assert set(dims) == {"FunctionName"} and dims["FunctionName"] in names, m
            assert metric in {"Invocations", "Errors", "Throttles", "Duration"}, m
        elif namespace == "AWS/RDS":
            assert dims in ({"DBClusterIdentifier": "postbox-prod"}, {"ProxyName": "postbox-prod"}), m
        elif namespace == "AWS/ApiGateway":
            assert dims == {"ApiId": "api123"}, m
        else:
            assert (namespace, dims) == ("AWS/SQS", {"QueueName": "postbox-prod-agent-failures"}), m
    # Every metric a surface or agent emits is on the dashboard.
    table_services = {*route_table.FUNCTIONS, *(a.name for a in agent_table.AGENTS)}
    assert seen_emf == {(svc, name) for svc, names_ in emitted.items() if svc in table_services for name in names_}
    titles = [w["properties"]["title"] for w in widgets]
    for surface in route_table.FUNCTIONS:
        assert {f"{surface}: requests and errors", f"{surface}: duration p50 / p99",
                f"{surface}: messages in / out"} <= set(titles)
    latency = [m for m in metrics if m[:2] == ["AWS/Lambda", "Duration"]]
    assert {m[-1]["stat"] for m in latency} == {"p50", "p99"}
    assert ["AWS/RDS", "DatabaseConnectionsCurrentlySessionPinned", "ProxyName", "postbox-prod"] in metrics
    assert ["AWS/RDS", "ServerlessDatabaseCapacity", "DBClusterIdentifier", "postbox-prod"] in metrics
    assert prod.exports["dashboard_name"] == "postbox-prod"


def test_dashboard_follows_the_tables(monkeypatch):
    """A new surface gets its row, with the metrics its module emits, by adding its table row."""
    monkeypatch.setattr(route_table, "FUNCTIONS", {**route_table.FUNCTIONS,
                                                   "extra": "functions.api.queues.app.handler"})
    metrics, widgets = dashboard_metrics(run_stack("prod"))
    assert "extra: messages in / out" in [w["properties"]["title"] for w in widgets]
    assert ["AWS/Lambda", "Invocations", "FunctionName", "postbox-prod-extra"] in metrics


def test_surface_metrics_come_from_their_emf_records_not_log_filters(prod: StackRun):
    """A surface's counts go out as EMF records (exact whatever its access lines sample): a metric
    filter on the same names would count them twice."""
    assert not prod.of_type("aws:cloudwatch/logMetricFilter:LogMetricFilter")


def test_the_tenant_widget_queries_the_surfaces_logs_for_emitted_metrics(prod: StackRun):
    """Per-tenant figures come from Logs Insights over the access lines' weights and the EMF records
    (each carries its tenant)."""
    _, widgets = dashboard_metrics(prod)
    (widget,) = [w for w in widgets if w["type"] == "log"]
    query = widget["properties"]["query"]
    sources = re.findall(r"SOURCE '([^']+)'", query)
    assert sources == [f"/aws/lambda/postbox-prod-{name}" for name in route_table.FUNCTIONS]
    groups = {g.inputs["name"] for g in prod.of_type("aws:cloudwatch/logGroup:LogGroup")}
    assert set(sources) <= groups
    summed = set(re.findall(r"sum\((\w+)\)", query)) - {"weight"}
    emitted = emitted_by_code()
    assert summed == {n for svc in route_table.FUNCTIONS for n in emitted.get(svc, ())}
    assert "by tenant" in query and "sum(weight) as requests" in query
