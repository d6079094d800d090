"""What each function may do and what it is told: its IAM statements and its environment.

By kind of function (from the route and schedule tables, never a list here):
* every function: its own log group, the VPC network interfaces Lambda manages, X-Ray with tracing;
* `migrate` alone: the master user's secret, and managing the two secrets it rotates;
* every other function: `rds-db:connect` as `postbox_app` through the proxy (an IAM token, no secret);
* surfaces: also `rds-db:connect` as `postbox_listen` on the cluster (long-poll LISTEN), and the
  encryption key ring; each resolves its requests' keys as `postbox_app` (told how long it may
  remember a key's answer: `POSTBOX_KEY_CACHE_SECONDS`, the bound on a revocation);
* functions that take messages into a queue with a consumer (the surfaces serving the queues
  routes, and the dispatcher itself): invoking the consumer-dispatch agent, asynchronously;
* agents: sending their failed runs to the failures queue; the dispatcher: assuming the consumer
  invoker role with a tenant's session tag (never invoking a consumer itself: infra/consumer_invoker.py);
* GDPR exports: the work-gdpr agent puts them in the export bucket, the surface serving the export
  routes reads them (to presign download URLs); both under `exports/` only.

Every database statement names every cell's proxy or cluster (one resource where there is one cell,
as before cells), and on a stack with `cells:` every function is told the cells (`POSTBOX_CELLS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from functions import routes as route_table
from functions import schedules as agent_table
from infra import cells as cell_parts
from infra import exports
from infra.cells import Cell
from infra.database import APP_USER, DB_NAME, LISTEN_USER, Database
from infra.network import PG_PORT
from infra.secrets import Secrets
from infra.settings import Settings

MIGRATE = "migrate"
CONSUMER_DISPATCH = "consumer-dispatch"
EXPORT_AGENT = "work-gdpr"
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
ROTATION_ACTIONS = [
    "secretsmanager:DescribeSecret",
    "secretsmanager:GetSecretValue",
    "secretsmanager:PutSecretValue",
    "secretsmanager:UpdateSecretVersionStage",
]


@dataclass(frozen=True)
class Spec:
    name: str  # logical name: surface, "migrate" or the agent's name
    handler: str
    kind: str
    memory_mb: int
    timeout_s: int


@dataclass
class Context:
    """What the policies and environments point at."""

    cells: list[Cell]  # the first is the default
    secrets: Secrets
    failures: aws.sqs.Queue
    consumer_invoker_arn: pulumi.Output[str]  # the role consumers are invoked as, one tenant at a time
    function_arn_prefix: pulumi.Output[str]  # arn:...:function:
    exports: aws.s3.Bucket  # the GDPR export bucket
    cells_named: bool = False  # the stack's config lists `cells:` (POSTBOX_CELLS is set)

    @property
    def db(self) -> Database:
        """The default cell's database (the old single-database settings point at it)."""
        return self.cells[0].db

    def each(self, of: Callable[[Cell], Any]) -> Any:
        """`of` every cell: a list, or the one value where there is one cell (as before cells)."""
        found = [of(cell) for cell in self.cells]
        return found[0] if len(found) == 1 else found


def has_dispatcher() -> bool:
    return any(a.name == CONSUMER_DISPATCH for a in agent_table.AGENTS)


def starts_dispatches(spec: Spec) -> bool:
    """Functions whose sends may find a consumer idle: those serving the queues routes or SQS's
    endpoint, and the dispatcher (which starts the next run of a queue it could not drain)."""
    if not has_dispatcher():
        return False
    if spec.kind == AGENT:
        return spec.name == CONSUMER_DISPATCH
    return spec.kind == SURFACE and any(
        r.function == spec.name and r.path.startswith((route_table.QUEUES, route_table.SQS)) for r in route_table.ROUTES
    )


def serves_queues(spec: Spec) -> bool:
    """The surface serving the queues routes (where a queue's consumer is set)."""
    return spec.kind == SURFACE and any(
        r.function == spec.name and r.path.startswith(route_table.QUEUES) for r in route_table.ROUTES
    )


def writes_exports(spec: Spec) -> bool:
    return spec.kind == AGENT and spec.name == EXPORT_AGENT


def serves_exports(spec: Spec) -> bool:
    """The surface whose routes answer export statuses and downloads (it presigns their URLs)."""
    return spec.kind == SURFACE and any(
        r.function == spec.name and "/data-export/" in r.path for r in route_table.ROUTES
    )


def dispatcher_name(s: Settings) -> str:
    return f"{s.prefix}-{CONSUMER_DISPATCH}"


def policy(s: Settings, spec: Spec, log_group_arn: pulumi.Output[str], ctx: Context) -> pulumi.Output[str]:
    statements: list[dict] = [
        {
            "Sid": "OwnLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [log_group_arn, pulumi.Output.concat(log_group_arn, ":*")],
        },
        {"Sid": "VpcNetworkInterfaces", "Effect": "Allow", "Action": VPC_ENI_ACTIONS, "Resource": "*"},
    ]

    def allow(sid: str, actions: list[str], resource) -> None:
        statements.append({"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resource})

    if s.tracing:
        # X-Ray has no resource-level permissions: these two actions only exist on "*".
        allow("XRay", XRAY_ACTIONS, "*")
    if spec.kind == MIGRATE:
        allow("DbMasterSecret", ["secretsmanager:GetSecretValue"], ctx.each(lambda c: c.db.secret_arn))
        allow("RotateSecrets", ROTATION_ACTIONS, [*(c.app_secret.arn for c in ctx.cells), ctx.secrets.keys.arn])
    else:
        allow("DbConnectAsApp", ["rds-db:connect"], ctx.each(lambda c: c.db.proxy_user_arn(APP_USER)))
    if spec.kind == SURFACE:
        allow("DbListen", ["rds-db:connect"], ctx.each(lambda c: c.db.cluster_user_arn(LISTEN_USER)))
        allow("EncryptionKeys", ["secretsmanager:GetSecretValue"], ctx.secrets.keys.arn)
    if starts_dispatches(spec):
        allow("StartConsumerDispatch", ["lambda:InvokeFunction"],
              pulumi.Output.concat(ctx.function_arn_prefix, dispatcher_name(s)))
    if spec.kind == AGENT:
        allow("ReportFailedRuns", ["sqs:SendMessage"], ctx.failures.arn)
    if spec.kind == AGENT and spec.name == CONSUMER_DISPATCH:
        allow("InvokeConsumersAsTheirTenant", ["sts:AssumeRole", "sts:TagSession"], ctx.consumer_invoker_arn)
    if writes_exports(spec):
        allow("WriteExports", ["s3:PutObject"], pulumi.Output.concat(ctx.exports.arn, "/", exports.PREFIX, "*"))
    if serves_exports(spec):
        allow("ReadExports", ["s3:GetObject"], pulumi.Output.concat(ctx.exports.arn, "/", exports.PREFIX, "*"))
    return pulumi.Output.json_dumps({"Version": "2012-10-17", "Statement": statements})


def environment(s: Settings, spec: Spec, ctx: Context) -> dict[str, pulumi.Input[str]]:
    """What postbox.config and functions.observability read; nothing secret (ARNs and names only)."""
    db = ctx.db
    env: dict[str, pulumi.Input[str]] = {
        "POSTBOX_DB_HOST": db.endpoint,
        "POSTBOX_DB_PORT": str(PG_PORT),
        "POSTBOX_DB_NAME": DB_NAME,
        "POSTBOX_DB_SSLMODE": "require",
        "POSTBOX_LONG_POLL_MS": str(s.long_poll_ms),
        "POWERTOOLS_SERVICE_NAME": spec.name,
        "POWERTOOLS_METRICS_NAMESPACE": "Postbox",
        # The Powertools Tracer needs the X-Ray SDK (not in the deps layer by default) and adds
        # cold start: off unless the stack turns tracing on.
        "POWERTOOLS_TRACE_DISABLED": "false" if s.tracing else "true",
    }
    if spec.kind == MIGRATE:
        env.update(
            POSTBOX_DB_SECRET_ARN=db.secret_arn,
            POSTBOX_APP_SECRET_ARN=ctx.cells[0].app_secret.arn,
            POSTBOX_ENCRYPTION_KEYS_SECRET_ARN=ctx.secrets.keys.arn,
            POSTBOX_DB_CLUSTER_HOST=db.cluster_endpoint,
            POSTBOX_LISTEN_CONNECTION_LIMIT=str(s.listen_connection_limit),
        )
    else:
        env.update(POSTBOX_DB_USER=APP_USER, POSTBOX_DB_IAM_AUTH="true")
    if ctx.cells_named:
        # The old settings above still name the first cell; POSTBOX_CELLS, when set, is what counts.
        env["POSTBOX_CELLS"] = cell_parts.environment(ctx.cells, with_secrets=spec.kind == MIGRATE)
        if spec.kind == MIGRATE:
            env["POSTBOX_CELL_APP_SECRETS"] = cell_parts.app_secrets(ctx.cells)
    if spec.kind == SURFACE:
        env.update(
            POSTBOX_FRONT_DOOR=s.front_door,
            POSTBOX_CORS_ORIGINS=",".join(s.cors_allow_origins),
            POSTBOX_LOG_SAMPLE_RATE=f"{s.log_sample_rate:g}",
            POSTBOX_LOG_SLOW_MS=str(s.log_slow_ms),
            POSTBOX_DB_LISTEN_HOST=db.cluster_endpoint,
            POSTBOX_DB_LISTEN_USER=LISTEN_USER,
            POSTBOX_ENCRYPTION_KEYS_SECRET_ARN=ctx.secrets.keys.arn,
            POSTBOX_KEY_CACHE_SECONDS=str(s.key_cache_seconds),
        )
    if starts_dispatches(spec):
        env["POSTBOX_CONSUMER_DISPATCH_FUNCTION"] = dispatcher_name(s)
    if serves_queues(spec) or (spec.kind == AGENT and spec.name == CONSUMER_DISPATCH):
        # How a tenant's consumer functions are named: the queues API refuses other names, and the
        # dispatcher checks them again before it invokes.
        env["POSTBOX_CONSUMER_FUNCTION_PATTERN"] = s.consumer_function_pattern
    if spec.kind == AGENT and spec.name == CONSUMER_DISPATCH:
        env["POSTBOX_CONSUMER_INVOKER_ROLE_ARN"] = ctx.consumer_invoker_arn
        env["AWS_STS_REGIONAL_ENDPOINTS"] = "regional"  # the VPC reaches STS through its regional endpoint
    if writes_exports(spec) or serves_exports(spec):
        env.update(POSTBOX_EXPORT_BUCKET=ctx.exports.bucket, POSTBOX_EXPORT_RETENTION_DAYS=str(s.export_retention_days),
                   POSTBOX_EXPORT_URL_SECONDS=str(s.export_url_seconds))
    return env


def reserved_concurrency(s: Settings, spec: Spec) -> int:
    """-1 (unreserved) or a cap: agents (and the dispatcher above all) must never crowd the database
    out; surfaces only when the stack asks (`apiReservedConcurrency`)."""
    if spec.kind == AGENT:
        cap = s.dispatch_reserved_concurrency if spec.name == CONSUMER_DISPATCH else s.agent_reserved_concurrency
    elif spec.kind == SURFACE:
        cap = s.api_reserved_concurrency
    else:
        cap = 0
    return cap or -1
