"""Every Lambda function: one per API surface, the authorizer, the migration runner, one per agent.

The lists come from `functions.routes.FUNCTIONS` and `functions.schedules.AGENTS`, never from here,
so a new surface or agent is deployed by adding its row. All functions share one code zip and the
two layers, run in the private subnets, and each gets its own role, granting only: writing to its
own log group, the VPC network interfaces Lambda manages, reading the DB secret, and X-Ray writes
when the stack turns tracing on. The consumer-dispatch agent alone may also invoke the consumer
functions it dispatches to (named by `consumerFunctionPattern`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from functions import routes as route_table
from functions import schedules as agent_table
from infra.artifacts import FUNCTIONS_ZIP, archive, layer_requirements
from infra.database import DB_NAME, Database
from infra.layers import ARCHITECTURE, RUNTIME, Layers
from infra.network import PG_PORT, Network
from infra.settings import Settings

AUTHORIZER = "authorizer"
MIGRATE = "migrate"
CONSUMER_DISPATCH = "consumer-dispatch"
SURFACE, AGENT = "surface", "agent"

# What the AWS managed AWSLambdaVPCAccessExecutionRole grants, on "*" as it does. Lambda manages the
# function's network interfaces with the execution role and validates these permissions when the
# function is created or updated; the Describe actions cannot be scoped at all, and scoping the
# others risks a create that Lambda refuses. Besides X-Ray (only with tracing on, and unscopable),
# no other statement in any role has a "*" resource, and none has a "*" action.
VPC_ENI_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
]
XRAY_ACTIONS = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]


@dataclass(frozen=True)
class Spec:
    name: str  # logical name: surface, "authorizer", "migrate" or the agent's name
    handler: str
    kind: str
    memory_mb: int
    timeout_s: int


@dataclass
class Deployed:
    spec: Spec
    function: aws.lambda_.Function
    role: aws.iam.Role
    log_group: aws.cloudwatch.LogGroup


def specs(s: Settings) -> list[Spec]:
    """Every function to deploy, from the route and schedule tables."""
    out = [
        Spec(name, handler, SURFACE, s.api_memory_mb, s.api_timeout_s)
        for name, handler in route_table.FUNCTIONS.items()
    ]
    out.append(
        Spec(
            AUTHORIZER,
            "functions.authorizer.handler",
            AUTHORIZER,
            s.authorizer_memory_mb,
            s.authorizer_timeout_s,
        )
    )
    out.append(Spec(MIGRATE, "functions.migrate.handler", MIGRATE, s.migrate_memory_mb, s.migrate_timeout_s))
    out += [Spec(a.name, a.handler, AGENT, s.agent_memory_mb, s.agent_timeout_s) for a in agent_table.AGENTS]
    names = [spec.name for spec in out]
    if len(set(names)) != len(names):
        raise ValueError(f"function names collide: {sorted(names)}")
    return out


def function_name(s: Settings, spec: Spec) -> str:
    name = f"{s.prefix}-{spec.name}"
    if len(name) > 64:
        raise ValueError(f"Lambda function name too long (max 64): {name}")
    return name


def _is_dispatcher(spec: Spec) -> bool:
    return spec.kind == AGENT and spec.name == CONSUMER_DISPATCH


def _policy(
    spec: Spec, log_group_arn: pulumi.Output[str], db: Database, consumer_arn: pulumi.Output[str], tracing: bool
):
    statements = [
        {
            "Sid": "OwnLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [log_group_arn, pulumi.Output.concat(log_group_arn, ":*")],
        },
        {"Sid": "VpcNetworkInterfaces", "Effect": "Allow", "Action": VPC_ENI_ACTIONS, "Resource": "*"},
        {
            "Sid": "DbSecret",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue"],
            "Resource": db.secret_arn,
        },
    ]
    if tracing:
        # X-Ray has no resource-level permissions: these two actions only exist on "*".
        statements.append({"Sid": "XRay", "Effect": "Allow", "Action": XRAY_ACTIONS, "Resource": "*"})
    if _is_dispatcher(spec):
        statements.append(
            {
                "Sid": "InvokeConsumers",
                "Effect": "Allow",
                "Action": ["lambda:InvokeFunction"],
                "Resource": consumer_arn,
            }
        )
    return pulumi.Output.json_dumps({"Version": "2012-10-17", "Statement": statements})


def _environment(s: Settings, spec: Spec, db: Database) -> dict[str, pulumi.Input[str]]:
    """What postbox.config and functions.observability read; nothing secret (the DB secret's ARN only)."""
    env: dict[str, pulumi.Input[str]] = {
        "POSTBOX_DB_HOST": db.endpoint,
        "POSTBOX_DB_PORT": str(PG_PORT),
        "POSTBOX_DB_NAME": DB_NAME,
        "POSTBOX_DB_SECRET_ARN": db.secret_arn,
        "POSTBOX_DB_SSLMODE": "require",
        "POSTBOX_LONG_POLL_MS": str(s.long_poll_ms),
        "POWERTOOLS_SERVICE_NAME": spec.name,
        "POWERTOOLS_METRICS_NAMESPACE": "Postbox",
        # The Powertools Tracer needs the X-Ray SDK (not in the deps layer by default) and adds
        # cold start: off unless the stack turns tracing on.
        "POWERTOOLS_TRACE_DISABLED": "false" if s.tracing else "true",
    }
    if _is_dispatcher(spec):
        # The functions its role may invoke, so it can refuse other names with a clear error.
        env["POSTBOX_CONSUMER_FUNCTION_PATTERN"] = s.consumer_function_pattern
    return env


def build(s: Settings, net: Network, db: Database, layers: Layers) -> dict[str, Deployed]:
    if s.tracing and "aws-xray-sdk" not in layer_requirements():
        raise ValueError("tracing needs aws-xray-sdk in layers/requirements.txt (then rebuild the layers)")
    code = archive(FUNCTIONS_ZIP)
    partition = aws.get_partition_output().partition
    region = aws.get_region_output().region
    account = aws.get_caller_identity_output().account_id
    consumer_arn = pulumi.Output.format(
        "arn:{0}:lambda:{1}:{2}:function:{3}", partition, region, account, s.consumer_function_pattern
    )
    trust = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "lambda.amazonaws.com"},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
    )

    deployed: dict[str, Deployed] = {}
    for spec in specs(s):
        name = function_name(s, spec)
        log_group = aws.cloudwatch.LogGroup(
            f"logs-{spec.name}", name=f"/aws/lambda/{name}", retention_in_days=s.log_retention_days
        )
        role = aws.iam.Role(f"role-{spec.name}", assume_role_policy=trust, description=f"Lambda {name}")
        policy = aws.iam.RolePolicy(
            f"policy-{spec.name}", role=role.id, policy=_policy(spec, log_group.arn, db, consumer_arn, s.tracing)
        )
        function = aws.lambda_.Function(
            f"fn-{spec.name}",
            name=name,
            description=f"Postbox {spec.kind}: {spec.name}",
            role=role.arn,
            runtime=RUNTIME,
            architectures=[ARCHITECTURE],
            handler=spec.handler,
            code=code,
            layers=layers.arns,
            memory_size=spec.memory_mb,
            timeout=spec.timeout_s,
            vpc_config=aws.lambda_.FunctionVpcConfigArgs(
                subnet_ids=net.subnet_ids, security_group_ids=[net.functions_sg.id]
            ),
            environment=aws.lambda_.FunctionEnvironmentArgs(variables=_environment(s, spec, db)),
            tracing_config=aws.lambda_.FunctionTracingConfigArgs(mode="Active" if s.tracing else "PassThrough"),
            logging_config=aws.lambda_.FunctionLoggingConfigArgs(log_format="Text", log_group=log_group.name),
            # The role's policy must exist before Lambda checks the VPC permissions on create.
            opts=pulumi.ResourceOptions(depends_on=[policy, log_group]),
        )
        if spec.kind == AGENT:
            # A sweep that failed is simply run again by the next tick: no async retries piling up.
            aws.lambda_.FunctionEventInvokeConfig(
                f"async-{spec.name}",
                function_name=function.name,
                maximum_retry_attempts=0,
                maximum_event_age_in_seconds=max(60, spec.timeout_s),
            )
        deployed[spec.name] = Deployed(spec, function, role, log_group)
    return deployed
