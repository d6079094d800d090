"""Streamed answers on AWS, and SnapStart, per stack.

Streaming (an open SSE read of the durable surface, `functions.streaming`): the durable function runs
the streaming runtime (`functions.lambda_runtime`, through the `stream-bootstrap` exec wrapper) with
Lambda's 15-minute timeout, so that an answer through a streaming door lasts up to
`streamMaxSeconds`. Its doors: its Function URL in RESPONSE_STREAM mode (`frontDoor: function-url`,
see `invoke_mode`), or, beside API Gateway's HTTP API (which buffers, and still serves every route
with its bounded windows), a regional REST API whose one `{proxy+}` route streams
(`responseTransferMode` STREAM) to the same function: the whole durable protocol at the output
`durable_stream_url` (`durableStreamingApi`, on by default with the API Gateway door).

SnapStart (`snapStart`: surface function names, `surfaces`, or `none`): those functions are
published with SnapStart and every door invokes their `live` alias, so a cold start restores a
snapshot taken after the init (`functions.snapstart` runs the hooks) instead of importing anew.
"""

from __future__ import annotations

import hashlib

import pulumi
import pulumi_aws as aws

from infra.access import SURFACE, Spec
from infra.settings import Settings

STREAMING = ("durable",)  # the surface functions whose answers may stream
EXEC_WRAPPER = "/var/task/functions/stream-bootstrap"  # the functions zip is mounted at /var/task
FUNCTION_TIMEOUT_S = 900  # Lambda's longest: a streamed answer ends DEADLINE_MARGIN_S before it
REST_TIMEOUT_MS = 900_000  # a STREAM integration's longest
ALIAS = "live"  # what the doors invoke of a SnapStart function: its published version


def streams(spec: Spec) -> bool:
    return spec.kind == SURFACE and spec.name in STREAMING


def environment(s: Settings, spec: Spec) -> dict[str, str]:
    """What a streaming function adds to its environment: the streaming runtime, the stream's cap."""
    if not streams(spec):
        return {}
    return {"AWS_LAMBDA_EXEC_WRAPPER": EXEC_WRAPPER, "POSTBOX_STREAM_MAX_SECONDS": str(s.stream_max_seconds)}


def timeout_s(s: Settings, spec: Spec) -> int:
    """A streaming function's timeout is Lambda's longest: its buffered answers still end within the
    long-poll wait, its streamed ones at `streamMaxSeconds`."""
    return FUNCTION_TIMEOUT_S if streams(spec) else spec.timeout_s


def invoke_mode(name: str) -> str:
    """The invoke mode of a surface function's URL (`frontDoor: function-url`)."""
    return "RESPONSE_STREAM" if name in STREAMING else "BUFFERED"


def snap_starts(s: Settings, spec: Spec) -> bool:
    return spec.kind == SURFACE and spec.name in s.snap_start


def snap_start_args(s: Settings, spec: Spec) -> aws.lambda_.FunctionSnapStartArgs | None:
    return aws.lambda_.FunctionSnapStartArgs(apply_on="PublishedVersions") if snap_starts(s, spec) else None


def alias(s: Settings, spec: Spec, function: aws.lambda_.Function) -> aws.lambda_.Alias | None:
    """A SnapStart function's `live` alias, on the version this deployment published."""
    if not snap_starts(s, spec):
        return None
    return aws.lambda_.Alias(f"alias-{spec.name}", name=ALIAS, function_name=function.name,
                             function_version=function.version,
                             description="What every door invokes: the published version, SnapStart on")


def build_rest_api(s: Settings, function: aws.lambda_.Function, function_arn: pulumi.Input[str],
                   qualifier: pulumi.Input[str] | None, name: str = "durable") -> pulumi.Output[str]:
    """The streaming REST API in front of `function` (its alias `qualifier` if any); its base URL."""
    region = aws.get_region_output().region
    partition = aws.get_partition_output().partition
    api = aws.apigateway.RestApi(
        f"{name}-stream", name=f"{s.prefix}-{name}-stream",
        description=f"Postbox {name}: every route, answers streamed (SSE reads stay open)",
        endpoint_configuration=aws.apigateway.RestApiEndpointConfigurationArgs(types="REGIONAL"),
    )
    proxy = aws.apigateway.Resource(f"{name}-stream-proxy", rest_api=api.id, parent_id=api.root_resource_id,
                                    path_part="{proxy+}")
    method = aws.apigateway.Method(f"{name}-stream-any", rest_api=api.id, resource_id=proxy.id, http_method="ANY",
                                   authorization="NONE")  # the function resolves the key, as behind the HTTP API
    uri = pulumi.Output.format("arn:{0}:apigateway:{1}:lambda:path/2021-11-15/functions/{2}/"
                               "response-streaming-invocations", partition, region, function_arn)
    integration = aws.apigateway.Integration(
        f"{name}-stream-integration", rest_api=api.id, resource_id=proxy.id, http_method=method.http_method,
        type="AWS_PROXY", integration_http_method="POST", uri=uri,
        response_transfer_mode="STREAM", timeout_milliseconds=REST_TIMEOUT_MS,
    )
    deployment = aws.apigateway.Deployment(
        f"{name}-stream-deployment", rest_api=api.id,
        triggers={"integration": hashlib.sha256(f"{REST_TIMEOUT_MS}:STREAM:{{proxy+}}:ANY".encode()).hexdigest()},
        opts=pulumi.ResourceOptions(depends_on=[integration]),
    )
    stage = aws.apigateway.Stage(f"{name}-stream-stage", rest_api=api.id, deployment=deployment.id, stage_name=ALIAS)
    aws.apigateway.MethodSettings(
        f"{name}-stream-throttle", rest_api=api.id, stage_name=stage.stage_name, method_path="*/*",
        settings=aws.apigateway.MethodSettingsSettingsArgs(throttling_burst_limit=s.throttle_burst,
                                                           throttling_rate_limit=s.throttle_rate),
    )
    aws.lambda_.Permission(f"rest-invoke-{name}", action="lambda:InvokeFunction", function=function.name,
                           qualifier=qualifier, principal="apigateway.amazonaws.com",
                           source_arn=pulumi.Output.concat(api.execution_arn, "/*/*/*"))
    return stage.invoke_url
