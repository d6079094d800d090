"""Queue attributes as SQS has them: which exist, their limits and defaults, how SQS reads the values
it is given, and which of them are columns of the Postbox queue (VisibilityTimeout; RedrivePolicy's
maxReceiveCount and target) and which SQS keeps beside it."""

from __future__ import annotations

import json
import re
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
# What a queue answers for an attribute never set (SQS encrypts a new queue with its own keys).
DEFAULTS = {**{name: str(d) for name, (_, _, d) in NUMBERS.items()}, "SqsManagedSseEnabled": "true",
            "ContentBasedDeduplication": "false", "DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue",
            "Policy": "", "KmsMasterKeyId": "", "RedriveAllowPolicy": ""}
_INTEGER = re.compile(r"^[+-]?[0-9]+$")  # as SQS's Java parses an integer: no spaces, no `_`, no fraction
ONE_SSE = ("You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or "
           "SQS SSE.")


def _integer(name: str, value: str, least: int, most: int) -> int:
    number = int(value) if _INTEGER.fullmatch(value) else None
    if number is None or not least <= number <= most:
        raise errors.attribute_value(name)  # SQS says no more (its limits are documented)
    return number


def boolean(name: str, value: str) -> str:
    """`true` or `false` from any spelling SQS takes (`True`, `FALSE`, ...): SQS answers them lowercase."""
    if value.lower() not in ("true", "false"):
        raise errors.attribute_value(name)
    return value.lower()


def check(given: dict[str, Any], *, fifo: bool, creating: bool,
          current: dict[str, Any] | None = None) -> dict[str, Any]:
    """The attributes a CreateQueue or SetQueueAttributes names, held to SQS's rules and read as SQS
    reads them: each known, settable and of the queue's type, a string, within its limits, and
    together consistent with what the queue holds (`current`). RedrivePolicy is parsed (`""` clears
    it); booleans come back lowercase, numbers as plain integers."""
    if not isinstance(given, dict):
        raise errors.invalid_parameter("Attributes must be a map of attribute names to values.")
    out: dict[str, Any] = {}
    for name, value in given.items():
        if name not in SETTABLE:
            raise errors.unknown_attribute(name)
        if not isinstance(value, str):
            raise errors.invalid_attribute_value(f"Invalid value for the parameter {name}: a string is expected.")
        if name == "FifoQueue":
            _fifo_queue(value, fifo, creating)
        elif name in FIFO_ONLY and not fifo:
            raise errors.unknown_attribute(name) if name in BOOLEANS else errors.fifo_only_attribute(name)
        elif name in BOOLEANS:
            out[name] = boolean(name, value)
        elif name in FIFO_ONLY:
            if value not in FIFO_ONLY[name]:
                raise errors.attribute_value(name)
            out[name] = value
        elif name in NUMBERS:
            least, most, _ = NUMBERS[name]
            out[name] = str(_integer(name, value, least, most))
        elif name == "VisibilityTimeout":
            out[name] = _integer(name, value, VISIBILITY[0], VISIBILITY[1])
        elif name == "RedrivePolicy":
            out[name] = redrive_policy(value)
        elif name == "Policy":
            out[name] = _policy(value)
        elif name == "RedriveAllowPolicy":
            out[name] = json.dumps(redrive_allow_policy(value), separators=(",", ":")) if value else ""
        else:
            out[name] = value
    _one_encryption(out)
    if fifo:
        _throughput_pairs(out, current or {})
    return out


def _policy(value: str) -> str:
    """An access policy: a JSON document (kept as given), or `""` for none."""
    try:
        doc = json.loads(value) if value else {}
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise errors.attribute_value("Policy")
    return value


def _fifo_queue(value: str, fifo: bool, creating: bool) -> None:
    """FifoQueue names the type a queue is made with: a standard queue knows no such attribute (even
    `false`), and a FIFO queue's stays true."""
    if not fifo:
        raise errors.unknown_attribute("FifoQueue")
    if boolean("FifoQueue", value) != "true" and not creating:
        raise errors.attribute_value("FifoQueue", "Modifying queue type is not supported.")


def _one_encryption(out: dict[str, Any]) -> None:
    """SSE-SQS and SSE-KMS exclude each other: both in one request are refused, and either one set
    turns the other off (a KMS key makes SqsManagedSseEnabled false)."""
    if out.get("SqsManagedSseEnabled") == "true" and out.get("KmsMasterKeyId"):
        raise errors.invalid_attribute_name(ONE_SSE)
    if out.get("KmsMasterKeyId"):
        out["SqsManagedSseEnabled"] = "false"
    elif out.get("SqsManagedSseEnabled") == "true":
        out["KmsMasterKeyId"] = ""


def _throughput_pairs(out: dict[str, Any], current: dict[str, Any]) -> None:
    """perMessageGroupId is allowed only when deduplication is by message group (high throughput)."""
    limit = out.get("FifoThroughputLimit", current.get("FifoThroughputLimit", DEFAULTS["FifoThroughputLimit"]))
    scope = out.get("DeduplicationScope", current.get("DeduplicationScope", DEFAULTS["DeduplicationScope"]))
    if limit == "perMessageGroupId" and scope != "messageGroup":
        raise errors.attribute_value("FifoThroughputLimit", "The perMessageGroupId value is allowed only when the "
                                     "value for DeduplicationScope is messageGroup.")


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
    count = doc["maxReceiveCount"]
    if isinstance(count, str) and _INTEGER.fullmatch(count):
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int):
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
        raise errors.invalid_parameter(
            f"Value {value[:1000]} for parameter RedriveAllowPolicy is invalid. Reason: redrivePermission must be "
            "allowAll, denyAll or byQueue, and byQueue names 1-10 sourceQueueArns.")
    return doc


def allows_source(allow_policy: str | None, source_arn: str) -> bool:
    if not allow_policy:
        return True
    doc = json.loads(allow_policy)
    if doc["redrivePermission"] == "denyAll":
        return False
    return doc["redrivePermission"] == "allowAll" or source_arn in doc.get("sourceQueueArns", [])


def default(name: str) -> str | None:
    return DEFAULTS.get(name)
