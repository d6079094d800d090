"""How SQS names a tenant's queues: a twelve-digit account id per tenant, queue URLs
(`<base>/sqs/<account>/<queue>`) and ARNs (`arn:aws:sqs:<region>:<account>:<queue>`).

The account id is derived from the tenant id, so it needs no table and is the same in every function.
"""

from __future__ import annotations

import functools
import re
import uuid

from .. import config
from . import errors

_ACCOUNT = re.compile(r"[0-9]{12}")


@functools.lru_cache(maxsize=4096)
def account_id(tenant_id: str) -> str:
    """Read on every request that names a queue URL: a warm function derives each tenant's once."""
    return f"{uuid.UUID(tenant_id).int % 10**12:012d}"


def region() -> str:
    return config.settings().region or "us-east-1"


def queue_url(base: str, tenant_id: str, name: str) -> str:
    return f"{base}/{account_id(tenant_id)}/{name}"


def queue_arn(tenant_id: str, name: str) -> str:
    return f"arn:aws:sqs:{region()}:{account_id(tenant_id)}:{name}"


def name_from_url(tenant_id: str, url: object) -> str:
    """The queue a QueueUrl names; another account's URL (another tenant's) names no queue of ours,
    which is answered as a queue that does not exist. A bare queue name is the caller's queue of that
    name, as SQS takes it. A URL whose account part is no account id is not a queue's address
    (InvalidAddress, as SQS answers); one with no path at all names no queue."""
    if not isinstance(url, str) or not url:
        raise errors.missing_parameter("QueueUrl")
    if "/" not in url:
        return url
    parts = url.rstrip("/").split("/")
    path = parts[3:] if url.startswith(("http://", "https://")) else parts
    if len(path) >= 2 and not _ACCOUNT.fullmatch(path[-2]):
        raise errors.invalid_address(url)
    if len(parts) < 2 or parts[-2] != account_id(tenant_id) or not parts[-1]:
        raise errors.no_queue()
    return parts[-1]


def name_from_arn(tenant_id: str, arn: object, parameter: str) -> str:
    """The queue an ARN of this tenant's account names (another account's: no such queue)."""
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not parts[5]:
        raise errors.invalid_parameter(f"Value {str(arn)[:200]} for parameter {parameter} is invalid. "
                                       "Reason: Invalid ARN.")
    if parts[4] != account_id(tenant_id):
        raise errors.no_queue()
    return parts[5]
