"""SQS's service model in its Query-protocol form, made from the JSON-protocol model botocore ships.

botocore's shapes give every action's members and their types. The Query protocol also names
flattened lists and maps on the wire (`Attribute.1.Name`, `SendMessageBatchRequestEntry.2.Id`,
`<Message>` repeated), names SQS's JSON model no longer carries; the tables below put them back,
as SQS's Query model had them. A model that has them already is left as it is."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from functools import cached_property, lru_cache
from pathlib import Path
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
    """SQS's service model (botocore's JSON, a fresh load: it is changed in place) made to speak the
    Query protocol."""
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
    """SQS's model as the installed botocore ships it (Lambda's runtime has botocore), read without
    importing botocore's client machinery, which a Query request has no use for."""
    import botocore

    folder = Path(botocore.__file__).parent / "data" / "sqs" / "2012-11-05"
    packed = folder / "service-2.json.gz"
    text = gzip.decompress(packed.read_bytes()) if packed.exists() else (folder / "service-2.json").read_bytes()
    return json.loads(text)


_TRAITS = (("locationName", "name"), ("flattened", "flattened"))  # as botocore names them in `serialization`


class Shape:
    """A shape as one reference to it sees it, as botocore resolves one: its type, its members and
    its Query traits (`serialization`: the wire `name`, `flattened`), the reference's own first."""

    def __init__(self, shapes: dict[str, Any], ref: dict[str, Any]) -> None:
        self._shapes = shapes
        self.name = ref["shape"]
        definition = shapes[self.name]
        self._definition = definition
        self.type_name = definition["type"]
        self.serialization = {trait: source[key] for key, trait in _TRAITS
                              for source in (definition, ref) if key in source}

    @cached_property
    def members(self) -> dict[str, Shape]:
        return {name: Shape(self._shapes, ref) for name, ref in self._definition.get("members", {}).items()}

    @cached_property
    def member(self) -> Shape:
        return Shape(self._shapes, self._definition["member"])

    @cached_property
    def key(self) -> Shape:
        return Shape(self._shapes, self._definition["key"])

    @cached_property
    def value(self) -> Shape:
        return Shape(self._shapes, self._definition["value"])


class QueryModel:
    """Each action's input and output shapes, in the Query form."""

    def __init__(self, model: dict[str, Any]) -> None:
        self._operations = model["operations"]
        self._shapes = model["shapes"]

    @property
    def operation_names(self) -> Iterable[str]:
        return self._operations.keys()

    @lru_cache(maxsize=64)  # noqa: B019 -- one model per process, kept for its life
    def input_shape(self, action: str) -> Shape | None:
        ref = self._operations[action].get("input")
        return Shape(self._shapes, ref) if ref else None

    @lru_cache(maxsize=64)  # noqa: B019
    def output_shape(self, action: str) -> Shape | None:
        ref = self._operations[action].get("output")
        return Shape(self._shapes, ref) if ref else None


@lru_cache(maxsize=1)
def service_model() -> QueryModel:
    """The Query form of SQS's model, built once per process, on the first Query request."""
    return QueryModel(query_form(botocore_model()))
