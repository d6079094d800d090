"""AddPermission and RemovePermission: the statements SQS writes into a queue's Policy attribute, one
per label, kept and answered as SQS keeps them. Postbox stores the policy only: who may call what is
decided by SQS credentials and their roles, never by a queue's policy."""

from __future__ import annotations

import json
import re
from typing import Any

from .. import db, tenancy
from ..tenancy import Principal
from . import errors, identity
from .queues import find, keep

MAX_ACTIONS = 7  # SQS's: a statement names at most seven actions
# What a queue's owner may share; any other SQS action only the owner may call.
SHAREABLE = ("*", "SendMessage", "ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility", "GetQueueAttributes",
             "GetQueueUrl", "ListDeadLetterSourceQueues", "PurgeQueue")
OWNER_ONLY = ("AddPermission", "RemovePermission", "SetQueueAttributes", "CreateQueue", "DeleteQueue", "ListQueues",
              "TagQueue", "UntagQueue", "ListQueueTags", "StartMessageMoveTask", "CancelMessageMoveTask",
              "ListMessageMoveTasks", "SendMessageBatch", "DeleteMessageBatch", "ChangeMessageVisibilityBatch")
_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ACCOUNT = re.compile(r"^[0-9]{12}$")


def _label(label: Any) -> str:
    if label is None or label == "":
        raise errors.missing_parameter("Label")
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise errors.invalid_parameter(f"Value {str(label)[:200]} for parameter Label is invalid. Reason: Can only "
                                       "include alphanumeric characters, hyphens, or underscores. 1 to 80 in length.")
    return label


def _names(value: Any, parameter: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.invalid_parameter(f"{parameter} must be a list of strings.")
    return value


def _statement(queue_arn: str, label: str, accounts: list[str], actions: list[str]) -> dict[str, Any]:
    """SQS's statement for a label: one principal or action is a string, more are a list."""
    principals = [f"arn:aws:iam::{a}:root" for a in dict.fromkeys(accounts)]
    named = [f"SQS:{a}" for a in dict.fromkeys(actions)]
    return {"Sid": label, "Effect": "Allow",
            "Principal": {"AWS": principals[0] if len(principals) == 1 else principals},
            "Action": named[0] if len(named) == 1 else named, "Resource": queue_arn}


def _checked(label: Any, accounts: Any, actions: Any) -> tuple[str, list[str], list[str]]:
    label = _label(label)
    actions, accounts = _names(actions, "Actions"), _names(accounts, "AWSAccountIds")
    if not actions:
        raise errors.missing_parameter("Actions")
    if not accounts or not all(_ACCOUNT.fullmatch(a) for a in accounts):
        raise errors.invalid_parameter(f"Value [{', '.join(accounts)[:500]}] for parameter PrincipalId is invalid. "
                                       "Reason: Unable to verify.")
    if len(actions) > MAX_ACTIONS:
        raise errors.over_limit(f"{len(actions)} Actions were found, maximum allowed is {MAX_ACTIONS}.")
    for action in actions:
        if action not in SHAREABLE:
            reason = "Only the queue owner is allowed to invoke this action." if action in OWNER_ONLY else \
                "Please refer to the appropriate WSDL for a list of valid actions."
            raise errors.invalid_parameter(f"Value SQS:{action[:100]} for parameter ActionName is invalid. "
                                           f"Reason: {reason}")
    return label, accounts, actions


def _policy(text: str | None, queue_arn: str) -> dict[str, Any]:
    """The queue's policy document, or the one SQS starts when the queue has none."""
    doc = json.loads(text) if text else None
    if not isinstance(doc, dict):
        doc = {"Version": "2008-10-17", "Id": f"{queue_arn}/SQSDefaultPolicy", "Statement": []}
    if isinstance(doc.get("Statement"), dict):
        doc["Statement"] = [doc["Statement"]]
    elif not isinstance(doc.get("Statement"), list):
        doc["Statement"] = []
    return doc


def _labels(doc: dict[str, Any]) -> list[Any]:
    return [s.get("Sid") for s in doc["Statement"] if isinstance(s, dict)]


def add(principal: Principal, name: str, label: Any, accounts: Any, actions: Any) -> dict[str, Any]:
    """A statement allowing `actions` to `accounts`, under a label the queue's policy does not have."""
    tenancy.require(principal, "manage")
    label, accounts, actions = _checked(label, accounts, actions)
    arn = identity.queue_arn(principal.tenant_id, name)
    with db.transaction() as conn:
        queue = find(conn, principal, name, lock=True)
        doc = _policy(queue.attributes.get("Policy"), arn)
        if label in _labels(doc):
            raise errors.invalid_parameter(f"Value {label} for parameter Label is invalid. Reason: Already exists.")
        doc["Statement"].append(_statement(arn, label, accounts, actions))
        keep(conn, queue.id, {"Policy": json.dumps(doc, separators=(",", ":"))})
    return {}


def remove(principal: Principal, name: str, label: Any) -> dict[str, Any]:
    """The statement of a label taken out of the queue's policy; the policy goes with its last one."""
    tenancy.require(principal, "manage")
    if label is None or label == "":
        raise errors.missing_parameter("Label")
    with db.transaction() as conn:
        queue = find(conn, principal, name, lock=True)
        doc = _policy(queue.attributes.get("Policy"), identity.queue_arn(principal.tenant_id, name))
        if not isinstance(label, str) or label not in _labels(doc):
            raise errors.invalid_parameter(f"Value {str(label)[:200]} for parameter Label is invalid. Reason: can't "
                                           "find label.")
        doc["Statement"] = [s for s in doc["Statement"] if not (isinstance(s, dict) and s.get("Sid") == label)]
        keep(conn, queue.id, {"Policy": json.dumps(doc, separators=(",", ":")) if doc["Statement"] else ""})
    return {}
