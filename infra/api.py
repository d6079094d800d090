"""The HTTP API: one route per row of `functions.routes.ROUTES`, each straight to its surface's
function, with no authorizer (`authorization_type` NONE).

Each surface function resolves the request's key itself (`functions.keys`, with a per-container
cache), so a request is one Lambda invocation. A gateway-side authorizer cannot do as well: its
results are cached only by identity source, and a route with an identity source answers a
request without that header with API Gateway's own 401, while public streams are readable without
a key and every surface shapes its own 401 body; without identity sources it cannot cache at all,
and runs (and is billed) on every request.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from functions import routes as route_table
from functions.routes import Route
from infra.functions import Deployed
from infra.settings import Settings

INTEGRATION_TIMEOUT_MS = 30_000  # the HTTP API maximum

# One line per request, short: what only API Gateway knows (the caller's address, requests that
# never reach a function: no route, throttled, too large; an integration's failure). The function's
# own line has the tenant and what it did; CloudWatch stamps each line's time.
ACCESS_LOG_FORMAT = json.dumps(
    {
        "id": "$context.requestId",
        "ip": "$context.identity.sourceIp",
        "req": "$context.httpMethod $context.path",
        "status": "$context.status",
        "ms": "$context.responseLatency",
        "error": "$context.integrationErrorMessage",
    },
    separators=(",", ":"),
)


@dataclass
class Api:
    api: aws.apigatewayv2.Api
    stage: aws.apigatewayv2.Stage
    routes: list[aws.apigatewayv2.Route]

    @property
    def url(self) -> pulumi.Output[str]:
        return self.stage.invoke_url


def route_resource_name(route: Route) -> str:
    """A stable, unique Pulumi name per route key (the key itself has spaces, braces, slashes)."""
    slug = re.sub(r"[^a-z0-9]+", "-", route.path.lower()).strip("-")
    digest = hashlib.sha256(route.route_key.encode()).hexdigest()[:8]
    return f"route-{route.method.lower()}-{slug}-{digest}"


def build(s: Settings, fns: dict[str, Deployed]) -> Api:
    api = aws.apigatewayv2.Api("http", name=s.prefix, protocol_type="HTTP", description="Postbox HTTP API")

    def allow_invoke(name: str, deployed: Deployed, source_arn: pulumi.Input[str]) -> None:
        aws.lambda_.Permission(
            name,
            action="lambda:InvokeFunction",
            function=deployed.function.name,
            qualifier=deployed.qualifier,  # a SnapStart function's alias
            principal="apigateway.amazonaws.com",
            source_arn=source_arn,
        )

    integrations: dict[str, aws.apigatewayv2.Integration] = {}
    for name in route_table.FUNCTIONS:
        integrations[name] = aws.apigatewayv2.Integration(
            f"integration-{name}",
            api_id=api.id,
            integration_type="AWS_PROXY",
            integration_method="POST",
            integration_uri=fns[name].invoke_arn,
            payload_format_version="2.0",
            timeout_milliseconds=INTEGRATION_TIMEOUT_MS,
        )
        allow_invoke(f"apigw-invoke-{name}", fns[name], pulumi.Output.concat(api.execution_arn, "/*/*"))

    routes = []
    for route in route_table.ROUTES:
        if route.function not in integrations:
            raise ValueError(f"{route.route_key} is served by unknown function {route.function!r}")
        routes.append(
            aws.apigatewayv2.Route(
                route_resource_name(route),
                api_id=api.id,
                route_key=route.route_key,
                target=pulumi.Output.concat("integrations/", integrations[route.function].id),
                authorization_type="NONE",  # the function resolves the key: see the module docstring
            )
        )

    access_logs = aws.cloudwatch.LogGroup(
        "api-access", name=f"/aws/apigateway/{s.prefix}", retention_in_days=s.log_retention_days
    )
    stage = aws.apigatewayv2.Stage(
        "default",
        api_id=api.id,
        name="$default",
        auto_deploy=True,
        access_log_settings=aws.apigatewayv2.StageAccessLogSettingsArgs(
            destination_arn=access_logs.arn, format=ACCESS_LOG_FORMAT
        ),
        default_route_settings=aws.apigatewayv2.StageDefaultRouteSettingsArgs(
            throttling_burst_limit=s.throttle_burst,
            throttling_rate_limit=s.throttle_rate,
        ),
        # Routes first, so the first auto-deployment already serves all of them.
        opts=pulumi.ResourceOptions(depends_on=routes),
    )
    return Api(api, stage, routes)
