"""Which functions a tenant's queue may name as its consumer: only the tenant's own.

A tenant's consumer functions are named `<prefix><tenant>-<name>`: the prefix is the deployment's
consumer function pattern without its `*` (`postbox-consumer-` by default), `<tenant>` the tenant
id's 32 hex digits (fixed length, so one tenant's prefix never begins another's), `<name>` letters,
digits, `-` or `_`, the whole at most 64 characters (Lambda's limit). The queues API refuses any
other name, the dispatcher checks it again before each batch (a name stored before the rule is
never invoked), and on AWS the dispatcher invokes as the tenant: with a session of the consumer
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
    """The name after the tenant's prefix when `function_name` is one of the tenant's, else None."""
    start = prefix(tenant_id)
    if (isinstance(function_name, str) and function_name.startswith(start) and len(function_name) <= MAX_NAME
            and _NAME.fullmatch(function_name[len(start):])):
        return function_name[len(start):]
    return None


def check(tenant_id: str, function_name: str) -> str:
    """The name, or Invalid saying what the tenant's consumer functions are named."""
    if own_name(tenant_id, function_name) is None:
        start = prefix(tenant_id)
        raise Invalid(
            f"consumer.function_name must name one of this tenant's functions: {start}<name>, where <name> is"
            f" 1-{MAX_NAME - len(start)} letters, digits, '-' or '_'.", code="consumer")
    return function_name
