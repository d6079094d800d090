"""How the consumer dispatcher calls a queue's function: a Lambda invoke on AWS, or, locally,
a Python callable named in POSTBOX_CONSUMERS (`send-email=mypkg.handlers.send_email,...`)."""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

from postbox.queues.consumers import Invoker


class ConsumerFailed(Exception):
    """The consumer function answered with an error."""


def local_consumers(spec: str | None = None) -> dict[str, str]:
    spec = os.environ.get("POSTBOX_CONSUMERS", "") if spec is None else spec
    pairs = (item.split("=", 1) for item in spec.split(",") if "=" in item)
    return {name.strip(): target.strip() for name, target in pairs}


def lambda_invoker(client: Any = None) -> Invoker:
    """Invoke the function synchronously; a FunctionError counts as a failure."""
    if client is None:
        import boto3

        client = boto3.client("lambda")

    def invoke(function_name: str, payload: dict[str, Any]) -> None:
        answer = client.invoke(
            FunctionName=function_name,
            InvocationType="RequestResponse",
            Payload=json.dumps(payload).encode(),
        )
        if answer.get("FunctionError"):
            detail = answer["Payload"].read()[:500].decode("utf-8", "replace")
            raise ConsumerFailed(f"{answer['FunctionError']}: {detail}")

    return invoke


def _python_callable(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _can_reach_lambda() -> bool:
    """On Lambda, or with a region configured for boto3: a Lambda invoke can at least be tried."""
    if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
        return True
    import boto3

    return boto3.session.Session().region_name is not None


def choose_invoker(lambda_client: Any = None) -> Invoker:
    """Functions named in POSTBOX_CONSUMERS run in process; every other name is a Lambda function."""
    local = local_consumers()
    remote: Invoker | None = None

    def invoke(function_name: str, payload: dict[str, Any]) -> None:
        nonlocal remote
        if function_name in local:
            _python_callable(local[function_name])(payload, None)
            return
        if remote is None:
            if lambda_client is None and not _can_reach_lambda():
                raise ConsumerFailed(
                    f"no local consumer named {function_name!r}: name a Python function for it with"
                    f" POSTBOX_CONSUMERS=\"{function_name}=package.module.function\" (or give AWS a region"
                    " and credentials to invoke a Lambda function of that name)")
            remote = lambda_invoker(lambda_client)
        remote(function_name, payload)

    return invoke
