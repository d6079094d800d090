"""SQS's service model in its Query-protocol form, made from the JSON-protocol model botocore ships.

botocore's shapes give every action's members and their types. The Query protocol also names
flattened lists and maps on the wire (`Attribute.1.Name`, `SendMessageBatchRequestEntry.2.Id`,
`<Message>` repeated), names SQS's JSON model no longer carries; the tables below put them back,
as SQS's Query model had them. A model that has them already is left as it is."""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

XML_NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"

# A list's member: the name each element takes (`AttributeName.1`, `<QueueUrl>` repeated).
LIST_MEMBERS = {
    "AWSAccountIdList": "AWSAccountId",
    "ActionNameList": "ActionName",
    "AttributeNameList": "AttributeName",
    "MessageAttributeNameList": "MessageAttributeName",
    "MessageSystemAttributeList": "MessageSystemAttributeName",
    "TagKeyList": "TagKey",
    "QueueUrlList": "QueueUrl",
    "MessageList": "Message",
    "StringList": "StringListValue",
    "BinaryList": "BinaryListValue",
    **{f"{entry}List": entry for entry in (
        "SendMessageBatchRequestEntry", "SendMessageBatchResultEntry",
        "DeleteMessageBatchRequestEntry", "DeleteMessageBatchResultEntry",
        "ChangeMessageVisibilityBatchRequestEntry", "ChangeMessageVisibilityBatchResultEntry",
        "BatchResultErrorEntry", "ListMessageMoveTasksResultEntry")},
}

# A flattened map: the name of each entry, then of its key and its value (`Tag.1.Key`, `Tag.1.Value`).
MAPS = {
    "QueueAttributeMap": ("Attribute", "Name", "Value"),
    "MessageSystemAttributeMap": ("Attribute", "Name", "Value"),
    "MessageBodyAttributeMap": ("MessageAttribute", "Name", "Value"),
    "MessageBodySystemAttributeMap": ("MessageSystemAttribute", "Name", "Value"),
    "TagMap": ("Tag", "Key", "Value"),
}


def query_form(model: dict[str, Any]) -> dict[str, Any]:
    """A copy of SQS's service model (botocore's JSON) that speaks the Query protocol."""
    model = copy.deepcopy(model)
    metadata = model["metadata"]
    for key in ("jsonVersion", "targetPrefix", "awsQueryCompatible"):
        metadata.pop(key, None)
    metadata.update(protocol="query", protocols=["query"], xmlNamespace=XML_NAMESPACE)
    for name, operation in model["operations"].items():
        if "output" in operation:
            operation["output"]["resultWrapper"] = f"{name}Result"
    shapes = model["shapes"]
    for name, member in LIST_MEMBERS.items():
        if name in shapes:
            shapes[name]["member"].setdefault("locationName", member)
    for name, (entry, key, value) in MAPS.items():
        if name in shapes:
            shapes[name].setdefault("locationName", entry)
            shapes[name]["key"].setdefault("locationName", key)
            shapes[name]["value"].setdefault("locationName", value)
    return model


def botocore_model() -> dict[str, Any]:
    """SQS's model as the installed botocore has it (Lambda's runtime ships botocore)."""
    from botocore.loaders import Loader

    return Loader().load_service_model("sqs", "service-2")


@lru_cache(maxsize=1)
def service_model():
    """The Query form as botocore's ServiceModel, built once per process, on the first Query request."""
    from botocore.model import ServiceModel

    return ServiceModel(query_form(botocore_model()), service_name="sqs")
