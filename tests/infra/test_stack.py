"""The Pulumi program under mocks: every route and schedule exists, nothing is public but the API,
storage is encrypted, TLS is required, and IAM is least privilege."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml
from stack_harness import (
    ACCOUNT,
    AZS,
    CLUSTER_ENDPOINT,
    CLUSTER_RESOURCE_ID,
    PROXY_ENDPOINT,
    PROXY_RESOURCE_ID,
    REGION,
    REPO,
    SECRET_ARN,
    Recorded,
    StackRun,
    run_stack,
)

from functions import routes as route_table
from functions import schedules as agent_table
from functions.routes import Route
from functions.schedules import Agent

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")

FUNCTION = "aws:lambda/function:Function"
ROUTE = "aws:apigatewayv2/route:Route"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
LAMBDA_TRUST = "lambda.amazonaws.com"
# The actions of the AWS managed AWSLambdaVPCAccessExecutionRole policy, which has Resource "*".
LAMBDA_VPC_ACTIONS = {
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
}
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}  # no resource-level scoping exists


def expected_functions() -> set[str]:
    return {*route_table.FUNCTIONS, "migrate", *(a.name for a in agent_table.AGENTS)}


def functions_by_name(run: StackRun) -> dict[str, Recorded]:
    return {r.inputs["environment"]["variables"]["POWERTOOLS_SERVICE_NAME"]: r for r in run.of_type(FUNCTION)}


def statements(doc: dict) -> list[dict]:
    st = doc["Statement"]
    return st if isinstance(st, list) else [st]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def lambda_role_policies(run: StackRun) -> dict[str, dict]:
    """Execution-role policy documents by function name (roles trusted by lambda.amazonaws.com)."""
    roles = {r.name: r for r in run.of_type(ROLE)}
    out = {}
    for policy in run.of_type(ROLE_POLICY):
        role = next(r for r in roles.values() if r.id == policy.inputs["role"])
        trust = role.policy()
        if any(st["Principal"].get("Service") == LAMBDA_TRUST for st in statements(trust)):
            out[role.name.removeprefix("role-")] = policy.policy()
    return out


# --- API ---------------------------------------------------------------------------------------


def test_one_route_per_table_row_straight_to_its_function(prod: StackRun):
    """No authorizer runs before a surface: each function resolves its requests' keys itself."""
    routes = prod.of_type(ROUTE)
    keys = [r.inputs["routeKey"] for r in routes]
    assert sorted(keys) == sorted(r.route_key for r in route_table.ROUTES)
    assert len(set(keys)) == len(keys)
    integrations = {i.id: i for i in prod.of_type("aws:apigatewayv2/integration:Integration")}
    by_key = {r.route_key: r for r in route_table.ROUTES}
    for route in routes:
        assert route.inputs["authorizationType"] == "NONE"
        assert not route.inputs.get("authorizerId")
        target = integrations[route.inputs["target"].removeprefix("integrations/")]
        served_by = by_key[route.inputs["routeKey"]].function
        assert target.inputs["integrationUri"].endswith(f":function:postbox-prod-{served_by}/invocations")


def test_integrations_are_lambda_proxy_payload_2(prod: StackRun):
    integrations = prod.of_type("aws:apigatewayv2/integration:Integration")
    assert len(integrations) == len(route_table.FUNCTIONS)
    for integ in integrations:
        assert integ.inputs["integrationType"] == "AWS_PROXY"
        assert integ.inputs["payloadFormatVersion"] == "2.0"
        assert integ.inputs["timeoutMilliseconds"] <= 30000


def test_no_authorizer_and_no_authorizer_function(prod: StackRun):
    assert prod.of_type("aws:apigatewayv2/authorizer:Authorizer") == []
    assert not [f for f in prod.of_type(FUNCTION) if "authorizer" in f.inputs["name"]]
    stage = prod.one("aws:apigatewayv2/stage:Stage", "default")
    assert "authorizer" not in json.dumps(stage.inputs["accessLogSettings"])


def test_api_gateway_may_invoke_each_surface_and_nothing_else(prod: StackRun):
    perms = [p for p in prod.of_type("aws:lambda/permission:Permission") if p.name.startswith("apigw-")]
    invoked = {p.inputs["function"] for p in perms}
    assert invoked == {f"postbox-prod-{n}" for n in route_table.FUNCTIONS}
    for p in perms:
        assert p.inputs["principal"] == "apigateway.amazonaws.com"
        assert p.inputs["action"] == "lambda:InvokeFunction"
        assert p.inputs["sourceArn"].startswith(f"arn:aws:execute-api:{REGION}:{ACCOUNT}:api123/")


def test_default_stage_auto_deploys_logs_and_throttles(prod: StackRun):
    (stage,) = prod.of_type("aws:apigatewayv2/stage:Stage")
    assert stage.inputs["name"] == "$default"
    assert stage.inputs["autoDeploy"] is True
    access = prod.one("aws:cloudwatch/logGroup:LogGroup", "api-access")
    assert stage.inputs["accessLogSettings"]["destinationArn"] == access.outputs["arn"]
    fields = json.loads(stage.inputs["accessLogSettings"]["format"])
    assert fields == {"id": "$context.requestId", "ip": "$context.identity.sourceIp",
                      "req": "$context.httpMethod $context.path", "status": "$context.status",
                      "ms": "$context.responseLatency", "error": "$context.integrationErrorMessage"}
    example = {"id": "JKJaXmPLvHcESHA=", "ip": "203.0.113.7", "req": "POST /api/v1/queues/orders/send",
               "status": "201", "ms": "12", "error": "-"}  # a typical send: about 120 bytes, the cost model's
    assert len(json.dumps(example, separators=(",", ":"))) <= 125
    throttle = stage.inputs["defaultRouteSettings"]
    assert throttle["throttlingBurstLimit"] == 500
    assert throttle["throttlingRateLimit"] == 1000


def test_api_url_is_exported(prod: StackRun):
    assert prod.exports["api_url"] == f"https://api123.execute-api.{REGION}.amazonaws.com/"
    assert prod.exports["db_proxy_endpoint"] == PROXY_ENDPOINT


def test_program_runs_the_way_pulumi_runs_it():
    """`main: infra/`: Pulumi runs the directory with runpy, cwd = infra/, infra/ first on sys.path.

    In a fresh interpreter (nothing imported yet), so infra/functions.py could shadow the repo's
    `functions` package if __main__.py did not fix the path.
    """
    # The harness puts the repo root on sys.path (as Pulumi's own exec script does not); runpy then
    # puts infra/ in front of it, which is the situation __main__.py has to repair.
    script = f"""
import json, sys
sys.path.insert(0, {str(REPO / "tests" / "infra")!r})
from stack_harness import run_stack
run = run_stack("prod", program=".")
print(json.dumps({{"api_url": run.exports["api_url"], "routes": len(run.of_type({ROUTE!r}))}}))
"""
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script], cwd=REPO / "infra", capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {
        "api_url": f"https://api123.execute-api.{REGION}.amazonaws.com/",
        "routes": len(route_table.ROUTES),
    }


# --- functions ---------------------------------------------------------------------------------


def test_one_function_per_surface_agent_and_migrate(prod: StackRun):
    fns = functions_by_name(prod)
    assert set(fns) == expected_functions()
    assert fns["migrate"].inputs["handler"] == "functions.migrate.handler"
    for name, handler in route_table.FUNCTIONS.items():
        assert fns[name].inputs["handler"] == handler
    for agent in agent_table.AGENTS:
        assert fns[agent.name].inputs["handler"] == agent.handler


def test_every_function_is_arm64_py312_in_the_private_subnets_with_both_layers(prod: StackRun):
    subnets = sorted(s.id for s in prod.of_type("aws:ec2/subnet:Subnet"))
    layers = {layer.name: layer.outputs["arn"] for layer in prod.of_type("aws:lambda/layerVersion:LayerVersion")}
    assert set(layers) == {"deps", "domain"}
    for fn in prod.of_type(FUNCTION):
        i = fn.inputs
        assert i["runtime"] == "python3.12"
        assert i["architectures"] == ["arm64"]
        assert sorted(i["vpcConfig"]["subnetIds"]) == subnets
        assert i["vpcConfig"]["securityGroupIds"] == ["sg-functions"]
        assert sorted(i["layers"]) == sorted(layers.values())
        assert i["code"].path.endswith("build/functions.zip")


def test_layers_are_arm64_py312(prod: StackRun):
    for layer in prod.of_type("aws:lambda/layerVersion:LayerVersion"):
        assert layer.inputs["compatibleRuntimes"] == ["python3.12"]
        assert layer.inputs["compatibleArchitectures"] == ["arm64"]
        assert layer.inputs["code"].path.endswith(f"build/layers/{layer.name}.zip")


def queue_surfaces() -> set[str]:
    """The functions whose sends go into the queues: the queues surface's and SQS's endpoint's."""
    return {r.function for r in route_table.ROUTES if r.path.startswith((route_table.QUEUES, route_table.SQS))}


def queues_surface() -> set[str]:
    return {r.function for r in route_table.ROUTES if r.path.startswith(route_table.QUEUES)}


INVOKER_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/postbox-prod-consumer-invoker"


def test_function_environment(prod: StackRun):
    """Only migrate holds a secret (the master user's); every other function logs in to the proxy as
    postbox_app with IAM tokens; surfaces LISTEN straight to the cluster and read the key ring."""
    app_secret, keys_secret = (prod.one("aws:secretsmanager/secret:Secret", n).outputs["arn"]
                               for n in ("db-app", "encryption-keys"))
    for name, fn in functions_by_name(prod).items():
        env = fn.inputs["environment"]["variables"]
        expected = {
            "POSTBOX_DB_HOST": PROXY_ENDPOINT,
            "POSTBOX_DB_PORT": "5432",
            "POSTBOX_DB_NAME": "postbox",
            "POSTBOX_DB_SSLMODE": "require",
            "POSTBOX_LONG_POLL_MS": "20000",
            "POWERTOOLS_SERVICE_NAME": name,
            "POWERTOOLS_METRICS_NAMESPACE": "Postbox",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        if name == "migrate":
            expected.update(POSTBOX_DB_SECRET_ARN=SECRET_ARN, POSTBOX_APP_SECRET_ARN=app_secret,
                            POSTBOX_ENCRYPTION_KEYS_SECRET_ARN=keys_secret, POSTBOX_DB_CLUSTER_HOST=CLUSTER_ENDPOINT,
                            POSTBOX_LISTEN_CONNECTION_LIMIT="100")
        else:
            expected.update(POSTBOX_DB_USER="postbox_app", POSTBOX_DB_IAM_AUTH="true")
        if name in route_table.FUNCTIONS:
            expected.update(POSTBOX_DB_LISTEN_HOST=CLUSTER_ENDPOINT, POSTBOX_DB_LISTEN_USER="postbox_listen",
                            POSTBOX_ENCRYPTION_KEYS_SECRET_ARN=keys_secret, POSTBOX_KEY_CACHE_SECONDS="30",
                            POSTBOX_FRONT_DOOR="api-gateway", POSTBOX_CORS_ORIGINS="*",
                            POSTBOX_LOG_SAMPLE_RATE="0.01", POSTBOX_LOG_SLOW_MS="1000")
        if name in queue_surfaces() | {"consumer-dispatch"}:
            expected["POSTBOX_CONSUMER_DISPATCH_FUNCTION"] = "postbox-prod-consumer-dispatch"
        if name in queues_surface() | {"consumer-dispatch"}:  # the queues API checks a consumer's name
            expected["POSTBOX_CONSUMER_FUNCTION_PATTERN"] = "postbox-consumer-*"
        if name == "consumer-dispatch":
            expected.update(POSTBOX_CONSUMER_INVOKER_ROLE_ARN=INVOKER_ROLE_ARN, AWS_STS_REGIONAL_ENDPOINTS="regional")
        if name in ("work", "work-gdpr"):  # the GDPR export routes' surface and the agent writing exports
            expected.update(POSTBOX_EXPORT_BUCKET="postbox-prod-exports-abc123", POSTBOX_EXPORT_RETENTION_DAYS="7",
                            POSTBOX_EXPORT_URL_SECONDS="900")
        if name == "durable":  # the streaming runtime, and its answers' cap (test_streaming.py)
            expected.update(AWS_LAMBDA_EXEC_WRAPPER="/var/task/functions/stream-bootstrap",
                            POSTBOX_STREAM_MAX_SECONDS="840")
        assert env == expected, name
        assert fn.inputs["tracingConfig"] == {"mode": "PassThrough"}


def test_log_group_per_function_with_retention(prod: StackRun):
    groups = {g.inputs["name"]: g for g in prod.of_type("aws:cloudwatch/logGroup:LogGroup")}
    for fn in prod.of_type(FUNCTION):
        group = groups[f"/aws/lambda/{fn.inputs['name']}"]
        assert group.inputs["retentionInDays"] == 14
        assert fn.inputs["loggingConfig"]["logGroup"] == group.inputs["name"]


def test_every_function_logs_json_and_drops_lambdas_info_lines(prod: StackRun):
    """JSON log format, so Lambda filters by level: START/END/REPORT (INFO) fall under the system
    level WARN; a request's one line (INFO) and every error pass the application level INFO."""
    for fn in prod.of_type(FUNCTION):
        config = fn.inputs["loggingConfig"]
        levels = config["applicationLogLevel"], config["systemLogLevel"]
        assert (config["logFormat"], *levels) == ("JSON", "INFO", "WARN")


def test_log_levels_and_the_key_cache_come_from_config():
    run = run_stack("staging", {"applicationLogLevel": "warn", "systemLogLevel": "INFO", "keyCacheSeconds": 5})
    for fn in run.of_type(FUNCTION):
        config = fn.inputs["loggingConfig"]
        assert (config["applicationLogLevel"], config["systemLogLevel"]) == ("WARN", "INFO")
    surfaces = {n: f for n, f in functions_by_name(run).items() if n in route_table.FUNCTIONS}
    assert {f.inputs["environment"]["variables"]["POSTBOX_KEY_CACHE_SECONDS"] for f in surfaces.values()} == {"5"}
    for bad in ({"systemLogLevel": "LOUD"}, {"applicationLogLevel": "WARNING"}, {"keyCacheSeconds": -1},
                {"keyCacheSeconds": 3600}):
        with pytest.raises(Exception, match="LogLevel|keyCacheSeconds"):
            run_stack("staging", bad)


def test_sizes_come_from_config():
    run = run_stack(
        "staging",
        {"apiMemoryMb": 1024, "apiTimeoutSeconds": 25, "longPollMs": 15000, "logRetentionDays": 30},
    )
    fns = functions_by_name(run)
    for name in route_table.FUNCTIONS:
        assert fns[name].inputs["memorySize"] == 1024
        assert fns[name].inputs["timeout"] == (900 if name == "durable" else 25)  # durable: test_streaming.py
    assert all(f.inputs["environment"]["variables"]["POSTBOX_LONG_POLL_MS"] == "15000" for f in fns.values())
    assert {g.inputs["retentionInDays"] for g in run.of_type("aws:cloudwatch/logGroup:LogGroup")} == {30}


def test_tracing_needs_the_xray_sdk_in_the_layer():
    with pytest.raises(Exception, match="aws-xray-sdk"):
        run_stack("staging", {"tracing": "true"})


def test_tracing_turns_on_xray(monkeypatch):
    import infra.functions

    monkeypatch.setattr(infra.functions, "layer_requirements", lambda: {"aws-xray-sdk", "psycopg"})
    run = run_stack("staging", {"tracing": "true"})
    for fn in run.of_type(FUNCTION):
        assert fn.inputs["tracingConfig"] == {"mode": "Active"}
        assert fn.inputs["environment"]["variables"]["POWERTOOLS_TRACE_DISABLED"] == "false"
    for name, policy in lambda_role_policies(run).items():
        xray = [st for st in statements(policy) if set(as_list(st["Action"])) == XRAY_ACTIONS]
        assert len(xray) == 1, name


def test_a_long_poll_longer_than_the_function_is_refused():
    with pytest.raises(Exception, match="longPollMs"):
        run_stack("staging", {"apiTimeoutSeconds": 20, "longPollMs": 25000})


# --- schedules and migrations ------------------------------------------------------------------


def test_one_schedule_per_agent_targeting_its_function(prod: StackRun):
    schedules = {s.name.removeprefix("schedule-"): s for s in prod.of_type("aws:scheduler/schedule:Schedule")}
    assert set(schedules) == {a.name for a in agent_table.AGENTS}
    roles = {r.outputs["arn"]: r for r in prod.of_type(ROLE)}
    failures_arn = prod.one("aws:sqs/queue:Queue", "agent-failures").outputs["arn"]
    for agent in agent_table.AGENTS:
        sched = schedules[agent.name].inputs
        assert sched["scheduleExpression"] == agent.schedule_expression
        assert sched["state"] == "ENABLED"
        assert sched["target"]["arn"] == f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:postbox-prod-{agent.name}"
        role = roles[sched["target"]["roleArn"]]
        (trust,) = statements(role.policy())
        assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
        policy = next(p for p in prod.of_type(ROLE_POLICY) if p.inputs["role"] == role.id).policy()
        invoke, dead_letter = statements(policy)
        assert invoke["Action"] == ["lambda:InvokeFunction"]
        assert all(res.startswith(sched["target"]["arn"]) for res in invoke["Resource"])
        assert dead_letter["Action"] == ["sqs:SendMessage"] and dead_letter["Resource"] == failures_arn
        assert sched["target"]["deadLetterConfig"] == {"arn": failures_arn}
        assert sched["target"]["retryPolicy"]["maximumRetryAttempts"] > 0


def test_migrate_invocation_carries_the_migrations_hash(prod: StackRun):
    digest = hashlib.sha256()
    sql = REPO / "shared" / "postbox" / "sql"
    for path in sorted(sql.rglob("*.sql"), key=lambda p: p.relative_to(sql).as_posix()):
        digest.update(path.relative_to(sql).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    (inv,) = prod.of_type("aws:lambda/invocation:Invocation")
    assert inv.inputs["functionName"] == "postbox-prod-migrate"
    assert json.loads(inv.inputs["input"])["migrations_sha256"] == digest.hexdigest()
    assert inv.inputs["triggers"] == {"migrations_sha256": digest.hexdigest()}


def test_migrations_hash_changes_with_any_migration(tmp_path):
    from infra.artifacts import migrations_sha256

    (tmp_path / "0001_a.sql").write_text("create table a();")
    (tmp_path / "notes.txt").write_text("ignored")
    first = migrations_sha256(tmp_path)
    (tmp_path / "notes.txt").write_text("still ignored")
    assert migrations_sha256(tmp_path) == first
    (tmp_path / "0002_b.sql").write_text("create table b();")
    second = migrations_sha256(tmp_path)
    (tmp_path / "0001_a.sql").write_text("create table a(x int);")
    third = migrations_sha256(tmp_path)
    (tmp_path / "functions").mkdir()
    (tmp_path / "functions" / "f.sql").write_text("create or replace function f() returns int ...;")
    fourth = migrations_sha256(tmp_path)
    (tmp_path / "functions" / "f.sql").write_text("create or replace function f() returns text ...;")
    assert len({first, second, third, fourth, migrations_sha256(tmp_path)}) == 5


# --- database and network ----------------------------------------------------------------------


def test_cluster_is_encrypted_private_and_protected_outside_dev(prod: StackRun, dev: StackRun):
    (cluster,) = prod.of_type("aws:rds/cluster:Cluster")
    c = cluster.inputs
    assert c["engine"] == "aurora-postgresql"
    assert c["storageEncrypted"] is True
    assert c["manageMasterUserPassword"] is True
    assert "masterPassword" not in c
    assert c["deletionProtection"] is True
    assert c["skipFinalSnapshot"] is False
    assert c["backupRetentionPeriod"] >= 7
    assert c["databaseName"] == "postbox"
    assert c["vpcSecurityGroupIds"] == ["sg-db"]
    assert c["serverlessv2ScalingConfiguration"] == {"minCapacity": 0.5, "maxCapacity": 4}
    for inst in prod.of_type("aws:rds/clusterInstance:ClusterInstance"):
        assert inst.inputs["publiclyAccessible"] is False
        assert inst.inputs["instanceClass"] == "db.serverless"
    (dev_cluster,) = dev.of_type("aws:rds/cluster:Cluster")
    assert dev_cluster.inputs["deletionProtection"] is False
    assert dev_cluster.inputs["storageEncrypted"] is True


def test_deletion_protection_and_acu_are_configurable():
    run = run_stack("dev", {"deletionProtection": "true", "dbMinAcu": 1, "dbMaxAcu": 8, "dbInstances": 2})
    (cluster,) = run.of_type("aws:rds/cluster:Cluster")
    assert cluster.inputs["deletionProtection"] is True
    assert cluster.inputs["serverlessv2ScalingConfiguration"] == {"minCapacity": 1, "maxCapacity": 8}
    assert len(run.of_type("aws:rds/clusterInstance:ClusterInstance")) == 2


def test_proxy_requires_tls_and_authenticates_with_the_cluster_secret(prod: StackRun):
    (proxy,) = prod.of_type("aws:rds/proxy:Proxy")
    p = proxy.inputs
    assert p["requireTls"] is True
    assert p["engineFamily"] == "POSTGRESQL"
    assert p["vpcSecurityGroupIds"] == ["sg-proxy"]
    app_secret = prod.one("aws:secretsmanager/secret:Secret", "db-app").outputs["arn"]
    # The master user (migrate) with its password; postbox_app only with IAM tokens.
    assert [(a["secretArn"], a["iamAuth"]) for a in p["auths"]] == [(SECRET_ARN, "DISABLED"), (app_secret, "REQUIRED")]
    assert all(a["authScheme"] == "SECRETS" for a in p["auths"])
    role = next(r for r in prod.of_type(ROLE) if r.outputs["arn"] == p["roleArn"])
    assert statements(role.policy())[0]["Principal"] == {"Service": "rds.amazonaws.com"}
    (st,) = statements(next(x for x in prod.of_type(ROLE_POLICY) if x.inputs["role"] == role.id).policy())
    assert st["Action"] == ["secretsmanager:GetSecretValue"]
    assert st["Resource"] == [SECRET_ARN, app_secret]
    (target,) = prod.of_type("aws:rds/proxyTarget:ProxyTarget")
    assert target.inputs["dbClusterIdentifier"] == "postbox-prod"


def test_private_subnets_across_azs(prod: StackRun):
    subnets = prod.of_type("aws:ec2/subnet:Subnet")
    assert len(subnets) >= 2
    assert len({s.inputs["availabilityZone"] for s in subnets}) == len(subnets)
    assert {s.inputs["availabilityZone"] for s in subnets} <= set(AZS)
    assert all(s.inputs["mapPublicIpOnLaunch"] is False for s in subnets)
    (group,) = prod.of_type("aws:rds/subnetGroup:SubnetGroup")
    assert sorted(group.inputs["subnetIds"]) == sorted(s.id for s in subnets)


def test_nothing_is_public_but_the_api(prod: StackRun):
    public_types = ("aws:ec2/internetGateway:InternetGateway", "aws:ec2/natGateway:NatGateway", "aws:ec2/eip:Eip")
    assert not [r for r in prod.resources if r.typ in public_types]
    for rule in prod.of_type(INGRESS):
        assert "cidrIpv4" not in rule.inputs and "cidrIpv6" not in rule.inputs and "prefixListId" not in rule.inputs
    assert not prod.of_type("aws:lambda/functionUrl:FunctionUrl")
    assert not prod.of_type("aws:ec2/securityGroupRule:SecurityGroupRule")
    for sg in prod.of_type("aws:ec2/securityGroup:SecurityGroup"):
        assert not sg.inputs.get("ingress") and not sg.inputs.get("egress")  # all rules are explicit


def test_security_group_rules_only_chain_functions_proxy_db(prod: StackRun):
    ingress = {(r.inputs["securityGroupId"], r.inputs["referencedSecurityGroupId"], r.inputs["fromPort"],
                r.inputs["toPort"], r.inputs["ipProtocol"]) for r in prod.of_type(INGRESS)}  # fmt: skip
    assert ingress == {
        ("sg-proxy", "sg-functions", 5432, 5432, "tcp"),
        ("sg-db", "sg-proxy", 5432, 5432, "tcp"),
        ("sg-db", "sg-functions", 5432, 5432, "tcp"),  # the long polls' LISTEN connections
        ("sg-endpoints", "sg-functions", 443, 443, "tcp"),
    }
    egress = {(r.inputs["securityGroupId"], r.inputs.get("referencedSecurityGroupId") or r.inputs["prefixListId"],
               r.inputs["fromPort"]) for r in prod.of_type(EGRESS)}  # fmt: skip
    assert egress == {
        ("sg-functions", "sg-proxy", 5432),
        ("sg-proxy", "sg-db", 5432),
        ("sg-functions", "sg-db", 5432),
        ("sg-functions", "sg-endpoints", 443),
        ("sg-functions", "pl-s3", 443),  # S3 (GDPR exports) through its gateway endpoint
    }


def test_interface_endpoints_for_the_aws_apis_functions_call(prod: StackRun):
    endpoints = {e.inputs["serviceName"]: e.inputs for e in prod.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
                 if e.inputs["vpcEndpointType"] == "Interface"}
    assert set(endpoints) >= {f"com.amazonaws.{REGION}.secretsmanager", f"com.amazonaws.{REGION}.lambda"}
    for ep in endpoints.values():
        assert ep["vpcEndpointType"] == "Interface"
        assert ep["privateDnsEnabled"] is True
        assert ep["securityGroupIds"] == ["sg-endpoints"]


# --- IAM ---------------------------------------------------------------------------------------


def test_no_wildcard_actions_anywhere(prod: StackRun):
    for policy in prod.of_type(ROLE_POLICY):
        for st in statements(policy.policy()):
            assert st["Effect"] == "Allow"
            for action in as_list(st["Action"]):
                assert "*" not in action, (policy.name, action)


def test_wildcard_resources_only_for_lambda_vpc_network_interfaces(prod: StackRun):
    for policy in prod.of_type(ROLE_POLICY):
        for st in statements(policy.policy()):
            if "*" in as_list(st["Resource"]):
                actions = set(as_list(st["Action"]))
                assert actions <= LAMBDA_VPC_ACTIONS or actions <= XRAY_ACTIONS, (policy.name, st)


def test_one_least_privilege_role_per_function(prod: StackRun):
    policies = lambda_role_policies(prod)
    assert set(policies) == expected_functions()
    groups = {g.name.removeprefix("logs-"): g.outputs["arn"] for g in prod.of_type("aws:cloudwatch/logGroup:LogGroup")}
    roles = {r.name.removeprefix("role-"): r.outputs["arn"] for r in prod.of_type(ROLE)}
    secret_arns = {r.name: r.outputs["arn"] for r in prod.of_type("aws:secretsmanager/secret:Secret")}
    for name, fn in functions_by_name(prod).items():
        assert fn.inputs["role"] == roles[name]
        for st in statements(policies[name]):
            actions = as_list(st["Action"])
            resources = as_list(st["Resource"])
            if any(a.startswith("logs:") for a in actions):
                assert "logs:CreateLogGroup" not in actions
                assert resources == [groups[name], groups[name] + ":*"]  # its own log group only
            if any(a.startswith("secretsmanager:") for a in actions):
                if name == "migrate":  # the master user's secret, and the two secrets it rotates
                    assert resources in ([SECRET_ARN], [secret_arns["db-app"], secret_arns["encryption-keys"]])
                else:  # the encryption key ring, read-only, for the surfaces alone
                    assert name in route_table.FUNCTIONS
                    assert (actions, resources) == (["secretsmanager:GetSecretValue"], [secret_arns["encryption-keys"]])
            if any(a.startswith("rds-db:") for a in actions):
                assert actions == ["rds-db:connect"] and name != "migrate"
                assert resources[0] in (
                    f"arn:aws:rds-db:{REGION}:{ACCOUNT}:dbuser:{PROXY_RESOURCE_ID}/postbox_app",
                    f"arn:aws:rds-db:{REGION}:{ACCOUNT}:dbuser:{CLUSTER_RESOURCE_ID}/postbox_listen",
                )
        connects = {r for st in statements(policies[name]) if st["Action"] == ["rds-db:connect"]
                    for r in as_list(st["Resource"])}
        if name == "migrate":
            assert not connects
        else:
            assert f"arn:aws:rds-db:{REGION}:{ACCOUNT}:dbuser:{PROXY_RESOURCE_ID}/postbox_app" in connects
            assert any(c.endswith("/postbox_listen") for c in connects) == (name in route_table.FUNCTIONS)


def invoke_statements(policy: dict) -> list[dict]:
    return [st for st in statements(policy) if any(a.startswith("lambda:") for a in as_list(st["Action"]))]


DISPATCHER_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:postbox-prod-consumer-dispatch"


def assert_invokes_only_what_it_must(run: StackRun) -> None:
    """The queues and SQS surfaces (whose sends start a dispatch) and the dispatcher (which restarts
    itself for a queue it could not drain) invoke the dispatcher; no function's own role invokes
    anything else: the consumers are invoked through the consumer invoker role alone."""
    for name, policy in lambda_role_policies(run).items():
        invoked = {st["Resource"] for st in invoke_statements(policy)}
        assert all(st["Action"] == ["lambda:InvokeFunction"] for st in invoke_statements(policy))
        if name in queue_surfaces() | {"consumer-dispatch"}:
            assert invoked == {DISPATCHER_ARN}, name
        else:
            assert not invoked, name
        assumes = [st for st in statements(policy) if any(a.startswith("sts:") for a in as_list(st["Action"]))]
        if name == "consumer-dispatch":
            assert assumes == [{"Sid": "InvokeConsumersAsTheirTenant", "Effect": "Allow",
                                "Action": ["sts:AssumeRole", "sts:TagSession"], "Resource": INVOKER_ROLE_ARN}]
        else:
            assert assumes == [], name


def test_only_the_dispatch_path_may_invoke_functions(prod: StackRun):
    assert_invokes_only_what_it_must(prod)
    if "consumer-dispatch" in lambda_role_policies(prod):
        assert_consumer_dispatch_scoped(prod, "postbox-consumer-*")


def assert_consumer_dispatch_scoped(run: StackRun, pattern: str) -> None:
    """The consumer invoker role: assumed by the dispatcher's role alone, with the tenant tag alone, it
    invokes only `<prefix><the session's tenant>-*`."""
    dispatcher_role = run.one(ROLE, "role-consumer-dispatch").outputs["arn"]
    invoker = run.one(ROLE, "consumer-invoker")
    assert invoker.inputs["name"] == "postbox-prod-consumer-invoker"
    assert statements(invoker.policy()) == [{
        "Sid": "DispatcherAsOneTenant", "Effect": "Allow", "Principal": {"AWS": dispatcher_role},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {"StringLike": {"aws:RequestTag/postbox-tenant": "?*"},
                      "ForAllValues:StringEquals": {"aws:TagKeys": ["postbox-tenant"]}}}]
    [policy] = [p for p in run.of_type(ROLE_POLICY) if p.inputs["role"] == invoker.id]
    prefix = pattern.removesuffix("*")
    assert statements(policy.policy()) == [{
        "Sid": "InvokeTheTenantsConsumers", "Effect": "Allow", "Action": ["lambda:InvokeFunction"],
        "Resource": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{prefix}${{aws:PrincipalTag/postbox-tenant}}-*"}]


def test_tables_drive_the_stack(monkeypatch):
    """A new surface, route and agent (here consumer-dispatch) deploy by adding their rows alone."""
    monkeypatch.setattr(route_table, "FUNCTIONS", {**route_table.FUNCTIONS,
                                                   "keyed-streams": "functions.api.keyed_streams.app.handler"})
    monkeypatch.setattr(route_table, "ROUTES",
                        (*route_table.ROUTES, Route("keyed-streams", "GET", "/v1/streams/{name+}")))
    dispatch = Agent("consumer-dispatch", "functions.agents.consumer_dispatch.handler", 60, "Push to consumers.")
    agents = [a for a in agent_table.AGENTS if a.name != dispatch.name]
    monkeypatch.setattr(agent_table, "AGENTS", (*agents, replace(dispatch)))
    run = run_stack("prod", {"consumerFunctionPattern": "acme-consumer-*"})

    assert "GET /v1/streams/{name+}" in {r.inputs["routeKey"] for r in run.of_type(ROUTE)}
    assert len(run.of_type(ROUTE)) == len(route_table.ROUTES)
    assert set(functions_by_name(run)) == expected_functions()
    schedules = {s.inputs["name"]: s.inputs for s in run.of_type("aws:scheduler/schedule:Schedule")}
    assert schedules["postbox-prod-consumer-dispatch"]["scheduleExpression"] == "rate(1 minute)"
    assert_consumer_dispatch_scoped(run, "acme-consumer-*")
    assert_invokes_only_what_it_must(run)


# --- alarms (more in test_operations.py) --------------------------------------------------------


def test_alarm_email_subscribes_to_the_one_topic_every_alarm_notifies():
    run = run_stack("prod", {"alarmEmail": "ops@example.com"})
    (topic,) = run.of_type("aws:sns/topic:Topic")
    (sub,) = run.of_type("aws:sns/topicSubscription:TopicSubscription")
    assert sub.inputs["endpoint"] == "ops@example.com"
    for alarm in run.of_type("aws:cloudwatch/metricAlarm:MetricAlarm"):
        assert alarm.inputs["alarmActions"] == [topic.outputs["arn"]]
    assert run.exports["alarm_topic_arn"] == topic.outputs["arn"]


# --- project files -----------------------------------------------------------------------------


def config_keys() -> set[str]:
    """Every `postbox:` key infra/settings.py reads."""
    src = (REPO / "infra" / "settings.py").read_text()
    return set(re.findall(r'(?:integer|number|boolean|cfg\.get)\("([A-Za-z0-9]+)"', src))


def test_project_file_runs_infra_with_the_repo_venv():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == "postbox"
    assert project["main"].rstrip("/") == "infra"
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"] == {"toolchain": "pip", "virtualenv": ".venv"}


def test_example_dev_config_is_valid():
    config = yaml.safe_load((REPO / "Pulumi.example.yaml").read_text())["config"]
    ours = {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("postbox:")}
    assert set(ours) <= config_keys(), set(ours) - config_keys()
    run = run_stack("dev", ours)
    (cluster,) = run.of_type("aws:rds/cluster:Cluster")
    assert cluster.inputs["deletionProtection"] is False


def test_every_config_key_is_documented():
    doc = (REPO / "docs" / "deploy.md").read_text()
    assert len(config_keys()) > 20
    assert [k for k in sorted(config_keys()) if f"| `{k}` |" not in doc] == []
