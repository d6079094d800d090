"""Every Lambda function: one per API surface (each resolves its requests' keys), the migration
runner, one per agent.

The lists come from `functions.routes.FUNCTIONS` and `functions.schedules.AGENTS`, never from here,
so a new surface or agent is deployed by adding its row. All functions share one code zip and the
two layers, run in the private subnets, and each gets its own role (infra/access.py says what each
kind may do).

Deploy order: the migrate function is created (or updated) first and run (`after_migrate`, the
migration invocations, one per cell); every other function depends on those runs, so new code never
meets an old schema on any cell. A failed migration fails the deploy before any surface changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from functions import routes as route_table
from functions import schedules as agent_table
from functions import sizes
from infra import access, consumer_invoker, streaming
from infra.access import AGENT, CONSUMER_DISPATCH, MIGRATE, SURFACE, Context, Spec
from infra.artifacts import FUNCTIONS_ZIP, archive, layer_requirements
from infra.cells import Cell
from infra.layers import ARCHITECTURE, RUNTIME, Layers
from infra.network import Network
from infra.secrets import Secrets
from infra.settings import Settings

__all__ = ["AGENT", "CONSUMER_DISPATCH", "MIGRATE", "SURFACE", "Deployed", "Spec", "build", "specs"]


@dataclass
class Deployed:
    spec: Spec
    function: aws.lambda_.Function
    role: aws.iam.Role
    log_group: aws.cloudwatch.LogGroup
    alias: aws.lambda_.Alias | None = None  # a SnapStart function's `live` alias: what callers invoke

    @property
    def invoke_arn(self) -> pulumi.Output[str]:
        """What API Gateway integrates with: the alias where there is one."""
        return (self.alias or self.function).invoke_arn

    @property
    def arn(self) -> pulumi.Output[str]:
        """What a caller invokes: the alias's ARN where there is one."""
        return (self.alias or self.function).arn

    @property
    def qualifier(self) -> pulumi.Output[str] | None:
        """The alias a permission to invoke must name, if any."""
        return self.alias.name if self.alias else None


def specs(s: Settings) -> list[Spec]:
    """Every function to deploy, from the route and schedule tables (migrate first)."""
    out = [Spec(MIGRATE, "functions.migrate.handler", MIGRATE, s.migrate_memory_mb or sizes.MIGRATE_MB,
                s.migrate_timeout_s)]
    out += [
        Spec(name, handler, SURFACE, s.api_memory_mb or sizes.surface_mb(name), s.api_timeout_s)
        for name, handler in route_table.FUNCTIONS.items()
    ]
    out += [Spec(a.name, a.handler, AGENT, s.agent_memory_mb or sizes.agent_mb(a.name), s.agent_timeout_s)
            for a in agent_table.AGENTS]
    names = [spec.name for spec in out]
    if len(set(names)) != len(names):
        raise ValueError(f"function names collide: {sorted(names)}")
    return out


def function_name(s: Settings, spec: Spec) -> str:
    name = f"{s.prefix}-{spec.name}"
    if len(name) > 64:
        raise ValueError(f"Lambda function name too long (max 64): {name}")
    return name


def build(
    s: Settings,
    net: Network,
    cells: list[Cell],
    layers: Layers,
    secrets: Secrets,
    failures: aws.sqs.Queue,
    after_migrate: Callable[[Deployed], list[pulumi.Resource]],
    exports: aws.s3.Bucket,
) -> dict[str, Deployed]:
    if s.tracing and "aws-xray-sdk" not in layer_requirements():
        raise ValueError("tracing needs aws-xray-sdk in layers/requirements.txt (then rebuild the layers)")
    code = archive(FUNCTIONS_ZIP)
    partition = aws.get_partition_output().partition
    region = aws.get_region_output().region
    account = aws.get_caller_identity_output().account_id
    ctx = Context(
        cells=cells,
        secrets=secrets,
        failures=failures,
        consumer_invoker_arn=consumer_invoker.role_arn(s, partition, account),
        function_arn_prefix=pulumi.Output.format("arn:{0}:lambda:{1}:{2}:function:", partition, region, account),
        exports=exports,
        cells_named=s.cells_named,
    )
    trust = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
    )

    deployed: dict[str, Deployed] = {}
    migration: list[pulumi.Resource] = []
    for spec in specs(s):
        name = function_name(s, spec)
        log_group = aws.cloudwatch.LogGroup(
            f"logs-{spec.name}", name=f"/aws/lambda/{name}", retention_in_days=s.log_retention_days
        )
        role = aws.iam.Role(f"role-{spec.name}", assume_role_policy=trust, description=f"Lambda {name}")
        policy = aws.iam.RolePolicy(
            f"policy-{spec.name}", role=role.id, policy=access.policy(s, spec, log_group.arn, ctx)
        )
        # The role's policy must exist before Lambda checks the VPC permissions on create; every
        # function but migrate waits for the migration run.
        after: list[pulumi.Resource] = [policy, log_group, *migration]
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
            timeout=streaming.timeout_s(s, spec),
            reserved_concurrent_executions=access.reserved_concurrency(s, spec),
            vpc_config=aws.lambda_.FunctionVpcConfigArgs(
                subnet_ids=net.subnet_ids, security_group_ids=[net.functions_sg.id]
            ),
            environment=aws.lambda_.FunctionEnvironmentArgs(
                variables={**access.environment(s, spec, ctx), **streaming.environment(s, spec)}),
            publish=streaming.snap_starts(s, spec),
            snap_start=streaming.snap_start_args(s, spec),
            tracing_config=aws.lambda_.FunctionTracingConfigArgs(mode="Active" if s.tracing else "PassThrough"),
            # JSON, so that Lambda filters by level: its own START/END/REPORT lines are INFO, below the
            # system level (WARN); a request's one line and every error are at or above the application's.
            logging_config=aws.lambda_.FunctionLoggingConfigArgs(
                log_format="JSON", log_group=log_group.name,
                application_log_level=s.application_log_level, system_log_level=s.system_log_level,
            ),
            opts=pulumi.ResourceOptions(depends_on=after),
        )
        if spec.kind == AGENT:
            # A run that still fails after its retries lands in the failures queue (an alarm watches it).
            aws.lambda_.FunctionEventInvokeConfig(
                f"async-{spec.name}",
                function_name=function.name,
                maximum_retry_attempts=s.agent_retries,
                maximum_event_age_in_seconds=max(60, spec.timeout_s * (s.agent_retries + 1)),
                destination_config=aws.lambda_.FunctionEventInvokeConfigDestinationConfigArgs(
                    on_failure=aws.lambda_.FunctionEventInvokeConfigDestinationConfigOnFailureArgs(
                        destination=failures.arn
                    )
                ),
                opts=pulumi.ResourceOptions(depends_on=[policy]),
            )
        deployed[spec.name] = Deployed(spec, function, role, log_group, streaming.alias(s, spec, function))
        if spec.kind == MIGRATE:
            migration = after_migrate(deployed[spec.name])
    if CONSUMER_DISPATCH in deployed:
        consumer_invoker.build(s, deployed[CONSUMER_DISPATCH].role, partition, region, account)
    return deployed
