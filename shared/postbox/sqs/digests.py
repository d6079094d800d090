"""The MD5 digests SQS answers and SDKs check: of a body, and of a message's (or its system)
attributes by SQS's encoding: for each attribute in name order, the name, the data type and the
value each as a 4-byte big-endian length and their bytes, the value preceded by its transport
type (1 for a string or number, 2 for binary)."""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any


def body_md5(body: str) -> str:
    return hashlib.md5(body.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


def _field(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def attributes_md5(attributes: dict[str, dict[str, Any]]) -> str | None:
    """The digest of `attributes` (SQS's wire form: DataType, StringValue or BinaryValue as base64),
    None when there are none (SQS then leaves the field out)."""
    if not attributes:
        return None
    md5 = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        md5.update(_field(name.encode()))
        md5.update(_field(value["DataType"].encode()))
        if "BinaryValue" in value:
            md5.update(b"\x02" + _field(base64.b64decode(value["BinaryValue"])))
        else:
            md5.update(b"\x01" + _field(value["StringValue"].encode("utf-8", "surrogatepass")))
    return md5.hexdigest()
