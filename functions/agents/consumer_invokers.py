"""How the consumer dispatcher calls a queue's function: a Lambda invoke on AWS, as the queue's
tenant, or, locally, a Python callable named in POSTBOX_CONSUMERS (`send-email=mypkg.handlers.send_email,...`).

On AWS (POSTBOX_CONSUMER_INVOKER_ROLE_ARN set) each tenant's invokes go through a session of the
consumer invoker role tagged `postbox-tenant=<tenant>`; that role may invoke only functions named
`<prefix><tenant>-*` for the tag's tenant, so even a name that slipped past the API's check could
not reach another tenant's function. Sessions are kept per tenant until shortly before they end.

An invoke waits for the function's answer at most the run's invoke timeout and is never retried:
the function may be running (a read timed out, a connection dropped after the request went), and
botocore's default retries would invoke it again, up to five times at once, each holding the
batch past the dispatcher's own end. A batch whose invoke fails in any way comes back after its
visibility timeout.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from postbox import config
from postbox.queues import consumer_functions
from postbox.queues.consumers import Invoker

SESSION_S = 900  # the shortest session STS gives
RENEW_BEFORE_S = 120  # a session this close to its end is not used for another invoke
CONNECT_TIMEOUT_S = 5.0
DEFAULT_INVOKE_TIMEOUT_S = 25.0  # an invoker made without a run's timeout (local use)


class ConsumerFailed(Exception):
    """The consumer function answered with an error."""


def local_consumers(spec: str | None = None) -> dict[str, str]:
    spec = os.environ.get("POSTBOX_CONSUMERS", "") if spec is None else spec
    pairs = (item.split("=", 1) for item in spec.split(",") if "=" in item)
    return {name.strip(): target.strip() for name, target in pairs}


def invoke_with(client: Any, function_name: str, payload: dict[str, Any]) -> None:
    """Invoke the function synchronously; a FunctionError counts as a failure."""
    answer = client.invoke(
        FunctionName=function_name,
        InvocationType="RequestResponse",
        Payload=json.dumps(payload).encode(),
    )
    if answer.get("FunctionError"):
        detail = answer["Payload"].read()[:500].decode("utf-8", "replace")
        raise ConsumerFailed(f"{answer['FunctionError']}: {detail}")


def invoke_config(timeout_s: float) -> Any:
    """A Lambda client's configuration for invoking consumers: one attempt, answered within
    `timeout_s` (botocore's default waits 60 s and tries five times)."""
    from botocore.config import Config

    return Config(read_timeout=timeout_s, connect_timeout=min(CONNECT_TIMEOUT_S, timeout_s),
                  retries={"total_max_attempts": 1})


def tenant_sessions(role_arn: str, sts: Any = None, make_client: Callable[..., Any] | None = None,
                    timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S) -> Callable[[str], Any]:
    """A Lambda client per tenant, on a session of `role_arn` tagged with the tenant."""
    import boto3

    sts = sts or boto3.client("sts")
    make_client = make_client or boto3.client
    held: dict[str, tuple[Any, float]] = {}
    lock = threading.Lock()

    def client_for(tenant_id: str) -> Any:
        token = consumer_functions.tenant_token(tenant_id)
        with lock:
            found = held.get(token)
            if found is not None and found[1] > time.monotonic():
                return found[0]
            credentials = sts.assume_role(
                RoleArn=role_arn, RoleSessionName=f"consumers-{token}", DurationSeconds=SESSION_S,
                Tags=[{"Key": consumer_functions.TENANT_TAG, "Value": token}],
            )["Credentials"]
            client = make_client("lambda", aws_access_key_id=credentials["AccessKeyId"],
                                 aws_secret_access_key=credentials["SecretAccessKey"],
                                 aws_session_token=credentials["SessionToken"], config=invoke_config(timeout_s))
            held[token] = (client, time.monotonic() + SESSION_S - RENEW_BEFORE_S)
            return client

    return client_for


def lambda_invoker(client: Any = None, client_for: Callable[[str], Any] | None = None,
                   timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S) -> Invoker:
    """Invoke as the tenant (a client per tenant from `client_for`; with the invoker role configured,
    a tagged session of it), or with one `client` for every tenant (local use with AWS credentials);
    the clients made here wait `timeout_s` for an answer and try once."""
    role_arn = config.settings().consumer_invoker_role_arn
    if client_for is None and client is None and role_arn:
        client_for = tenant_sessions(role_arn, timeout_s=timeout_s)
    elif client_for is None:
        if client is None:
            import boto3

            client = boto3.client("lambda", config=invoke_config(timeout_s))
        client_for = lambda tenant_id: client  # noqa: E731

    def invoke(tenant_id: str, function_name: str, payload: dict[str, Any]) -> None:
        invoke_with(client_for(tenant_id), function_name, payload)

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


def choose_invoker(lambda_client: Any = None, timeout_s: float = DEFAULT_INVOKE_TIMEOUT_S) -> Invoker:
    """Functions named in POSTBOX_CONSUMERS run in process, by their whole name or by the name after
    the tenant's prefix (`send-email` serves `postbox-consumer-<tenant>-send-email`); every other
    name is a Lambda function, given `timeout_s` to answer."""
    local = local_consumers()
    remote: Invoker | None = None

    def invoke(tenant_id: str, function_name: str, payload: dict[str, Any]) -> None:
        nonlocal remote
        own = consumer_functions.own_name(tenant_id, function_name)
        target = local.get(function_name) or (local.get(own) if own else None)
        whole = consumer_functions.function_of(tenant_id, function_name) or function_name
        if target:
            _python_callable(target)(payload, None)
            return
        if remote is None:
            if lambda_client is None and not _can_reach_lambda():
                raise ConsumerFailed(
                    f"no local consumer named {own or function_name!r}: name a Python function for it with"
                    f" POSTBOX_CONSUMERS=\"{own or function_name}=package.module.function\" (or give AWS a region"
                    " and credentials to invoke a Lambda function of that name)")
            remote = lambda_invoker(lambda_client, timeout_s=timeout_s)
        remote(tenant_id, whole, payload)

    return invoke
