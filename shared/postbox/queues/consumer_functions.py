"""Which functions a tenant's queue may name as its consumer: only the tenant's own.

A tenant's consumer functions are named `<prefix><tenant>-<name>`: the prefix is the deployment's
consumer function pattern without its `*` (`postbox-consumer-` by default), `<tenant>` the tenant
id's 32 hex digits (fixed length, so one tenant's prefix never begins another's), `<name>` letters,
digits, `-` or `_`, the whole at most 64 characters (Lambda's limit). A queue names one either whole
or by its `<name>` alone (`send-email`, as the queues API's own example does): a bare name always
means the tenant's own function, whatever it spells. The queues API refuses any other name, the
dispatcher checks it again before each batch (a name stored before the rule is never invoked) and
invokes the whole name, and on AWS the dispatcher invokes as the tenant: with a session of the consumer
invoker role tagged `postbox-tenant=<tenant>`, whose policy allows
`lambda:InvokeFunction` on `<prefix>${aws:PrincipalTag/postbox-tenant}-*` and nothing else.
"""

from __future__ import annotations

import re
import uuid

from .. import config
from ..errors import Invalid

TENANT_TAG = "postbox-tenant"  # the session tag the invoker role's policy reads
MAX_NAME = 64  # Lambda's limit on a function name
_NAME = re.compile(r"[A-Za-z0-9_-]+")


def tenant_token(tenant_id: str) -> str:
    """The tenant as its function names and its invoker session's tag carry it."""
    return uuid.UUID(str(tenant_id)).hex


def prefix(tenant_id: str) -> str:
    """What every consumer function of the tenant's is named with, up to its own name."""
    return config.settings().consumer_function_pattern.removesuffix("*") + tenant_token(tenant_id) + "-"


def own_name(tenant_id: str, function_name: str) -> str | None:
    """The `<name>` of the tenant's function that `function_name` names (whole, or as its bare name),
    else None."""
    if not isinstance(function_name, str):
        return None
    start = prefix(tenant_id)
    name = function_name.removeprefix(start)
    if _NAME.fullmatch(name) and len(start) + len(name) <= MAX_NAME:
        return name
    return None


def function_of(tenant_id: str, function_name: str) -> str | None:
    """The whole name of the tenant's function that `function_name` names, else None."""
    name = own_name(tenant_id, function_name)
    return prefix(tenant_id) + name if name is not None else None


def check(tenant_id: str, function_name: str) -> str:
    """The name as given, or Invalid saying what the tenant's consumer functions are named."""
    if own_name(tenant_id, function_name) is None:
        start = prefix(tenant_id)
        raise Invalid(
            f"consumer.function_name must name one of this tenant's functions: <name> or {start}<name>, where"
            f" <name> is 1-{MAX_NAME - len(start)} letters, digits, '-' or '_'.", code="consumer")
    return function_name
