"""Queue attributes as SQS has them: which exist, their limits and defaults, and which of them are
columns of the Postbox queue (VisibilityTimeout; RedrivePolicy's maxReceiveCount and target) and
which SQS keeps beside it."""

from __future__ import annotations

import json
from typing import Any

from . import errors

# name: (least, most, default) of the numeric attributes SQS keeps beside the queue
NUMBERS: dict[str, tuple[int, int, int]] = {
    "DelaySeconds": (0, 900, 0),
    "MaximumMessageSize": (1024, 1_048_576, 1_048_576),  # SQS's 1 MiB since August 2025
    "MessageRetentionPeriod": (60, 1_209_600, 345_600),
    "ReceiveMessageWaitTimeSeconds": (0, 20, 0),
    "KmsDataKeyReusePeriodSeconds": (60, 86_400, 300),
}
VISIBILITY = (0, 43_200, 30)
TEXTS = ("Policy", "KmsMasterKeyId", "RedriveAllowPolicy")
BOOLEANS = ("SqsManagedSseEnabled", "ContentBasedDeduplication")
FIFO_ONLY = {"ContentBasedDeduplication": ("true", "false"), "DeduplicationScope": ("messageGroup", "queue"),
             "FifoThroughputLimit": ("perQueue", "perMessageGroupId")}
SETTABLE = (*NUMBERS, "VisibilityTimeout", "RedrivePolicy", *TEXTS, *BOOLEANS, *FIFO_ONLY, "FifoQueue")
READ_ONLY = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
             "ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn")
ALL = tuple(dict.fromkeys((*SETTABLE, *READ_ONLY)))
MAX_RECEIVE_COUNT = 1000


def _integer(name: str, value: Any, least: int, most: int) -> int:
    try:
        number = int(str(value), 10)
    except ValueError:
        number = None
    if number is None or not least <= number <= most:
        raise errors.attribute_value(name)  # SQS says no more (its limits are documented)
    return number


def check(given: dict[str, Any], *, fifo: bool, creating: bool) -> dict[str, Any]:
    """The attributes a CreateQueue or SetQueueAttributes names, held to SQS's rules: each known and
    settable, a string, within its limits. RedrivePolicy is parsed (`""` clears it)."""
    if not isinstance(given, dict):
        raise errors.invalid_parameter("Attributes must be a map of attribute names to values.")
    out: dict[str, Any] = {}
    for name, value in given.items():
        if name not in SETTABLE:
            raise errors.unknown_attribute(name)
        if not isinstance(value, str):
            raise errors.invalid_attribute_value(f"Invalid value for the parameter {name}: a string is expected.")
        if name == "FifoQueue":
            if not creating:  # a FIFO queue takes `true` again; a standard queue knows no FifoQueue
                if not fifo:
                    raise errors.unknown_attribute(name)
                if value.lower() != "true":
                    raise errors.attribute_value(name, "Modifying queue type is not supported.")
                continue
            if value.lower() != str(fifo).lower():
                raise errors.invalid_attribute_value(
                    "Invalid value for the parameter FifoQueue. Reason: The name of a FIFO queue can only include "
                    "alphanumeric characters, hyphens, or underscores, must end with .fifo suffix." if fifo is False
                    else "Invalid value for the parameter FifoQueue.")
            continue
        if name in FIFO_ONLY:
            if not fifo:
                raise errors.unknown_attribute(name) if name == "ContentBasedDeduplication" else \
                    errors.fifo_only_attribute(name)
            if value not in FIFO_ONLY[name]:
                raise errors.invalid_attribute_value(f"Invalid value for the parameter {name}.")
            out[name] = value
        elif name in NUMBERS:
            least, most, _ = NUMBERS[name]
            out[name] = str(_integer(name, value, least, most))
        elif name == "VisibilityTimeout":
            out[name] = _integer(name, value, VISIBILITY[0], VISIBILITY[1])
        elif name in BOOLEANS:
            if value.lower() not in ("true", "false"):
                raise errors.invalid_attribute_value(f"Invalid value for the parameter {name}.")
            out[name] = value.lower()
        elif name == "RedrivePolicy":
            out[name] = redrive_policy(value)
        elif name == "RedriveAllowPolicy":
            out[name] = json.dumps(redrive_allow_policy(value), separators=(",", ":")) if value else ""
        else:
            out[name] = value
    return out


def redrive_policy(value: str) -> dict[str, Any] | None:
    """{deadLetterTargetArn, maxReceiveCount, text: the policy as given} from its JSON text; None for
    `""` (no redrive). SQS answers a policy it refuses as an invalid value of the parameter, quoting it."""
    if value == "":
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise errors.invalid_redrive_policy(value, "Redrive policy is not a dict or valid json.")
    for name in ("maxReceiveCount", "deadLetterTargetArn"):  # in the order SQS checks them
        if name not in doc:
            raise errors.invalid_redrive_policy(value, f"Redrive policy does not contain mandatory attribute: {name}.")
    for name in set(doc) - {"deadLetterTargetArn", "maxReceiveCount"}:
        raise errors.invalid_redrive_policy(value, f"Redrive policy contains an unknown attribute: {name}.")
    try:
        count = int(str(doc["maxReceiveCount"]), 10)
    except ValueError:
        count = None
    if count is None or not 1 <= count <= MAX_RECEIVE_COUNT:
        raise errors.invalid_redrive_policy(value, f"Invalid value for maxReceiveCount: {doc['maxReceiveCount']}, "
                                                   f"valid values are from 1 to {MAX_RECEIVE_COUNT} both inclusive.")
    if not isinstance(doc["deadLetterTargetArn"], str):
        raise errors.invalid_redrive_policy(value, "Invalid value for deadLetterTargetArn.")
    return {"deadLetterTargetArn": doc["deadLetterTargetArn"], "maxReceiveCount": count, "text": value}


def redrive_allow_policy(value: str) -> dict[str, Any]:
    try:
        doc = json.loads(value)
    except ValueError:
        doc = None
    ok = isinstance(doc, dict) and doc.get("redrivePermission") in ("allowAll", "denyAll", "byQueue") and \
        set(doc) <= {"redrivePermission", "sourceQueueArns"}
    arns = doc.get("sourceQueueArns") if ok else None
    if ok and doc["redrivePermission"] == "byQueue":
        ok = isinstance(arns, list) and 0 < len(arns) <= 10 and all(isinstance(a, str) for a in arns)
    elif ok:
        ok = arns is None
    if not ok:
        raise errors.invalid_attribute_value(
            "Value for parameter RedriveAllowPolicy is invalid. Reason: redrivePermission must be allowAll, denyAll "
            "or byQueue, and byQueue names 1-10 sourceQueueArns.")
    return doc


def allows_source(allow_policy: str | None, source_arn: str) -> bool:
    if not allow_policy:
        return True
    doc = json.loads(allow_policy)
    if doc["redrivePermission"] == "denyAll":
        return False
    return doc["redrivePermission"] == "allowAll" or source_arn in doc.get("sourceQueueArns", [])


def default(name: str) -> str | None:
    if name in NUMBERS:
        return str(NUMBERS[name][2])
    return None
