"""SQS's older Query protocol: form parameters (`Action=SendMessage&MessageAttribute.1.Name=…`) read
into the same parameters the JSON protocol carries, and answers written as SQS's XML, both driven
by the action's input and output shapes in SQS's service model (see `query_model`), so no action
is written out here. The endpoint imports this module only when a Query request arrives."""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import parse_qsl

from postbox.sqs import errors

from .query_model import XML_NAMESPACE, service_model

VERSION = "2012-11-05"
MAX_PARAMETERS = 5000  # a full batch of ten entries, each with ten attributes, takes some 500
_INDEX = re.compile(r"[1-9][0-9]{0,5}")
# Where a NUL is SQS's to refuse as it refuses any character a message may not hold (a body, an
# attribute's text): per batch entry, in SQS's words. Anywhere else it is refused before the action.
_MESSAGE_TEXT = ("MessageBody", ".StringValue")
_INTEGER = re.compile(r"-?[0-9]{1,18}")
# What a text node cannot hold as it is: markup, and #xD (which XML parsers read as a line end);
# XML 1.0 cannot carry the other control characters and lone surrogates at all. SQS also writes a
# quotation mark as `&quot;` (a receipt handle's error quotes it), so the bytes are SQS's too.
_ESCAPED = re.compile("[&<>\"\r\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\r": "&#xD;"}


class _Node:
    """One dotted name's part: the value given for it, and the parts given under it."""

    __slots__ = ("value", "children")

    def __init__(self) -> None:
        self.value: str | None = None
        self.children: dict[str, _Node] = {}


# ---- requests ---------------------------------------------------------------------------------


def read(*forms: bytes | str) -> tuple[str, dict[str, Any]]:
    """(action, parameters) of a Query request's forms (its query string, its body), taken together."""
    try:
        texts = [form.decode("utf-8") if isinstance(form, bytes) else form for form in forms]
        pairs = parse_qsl("&".join(text for text in texts if text), keep_blank_values=True, encoding="utf-8",
                          errors="strict", max_num_fields=MAX_PARAMETERS)
    except UnicodeDecodeError:
        raise errors.invalid_contents("Invalid characters found: the parameters are not UTF-8.") from None
    except ValueError:  # more fields than any action takes
        raise errors.malformed(f"A request takes at most {MAX_PARAMETERS} parameters.") from None
    root = _Node()
    for key, value in pairs:
        if "\x00" in key or ("\x00" in value and not key.endswith(_MESSAGE_TEXT)):
            raise errors.invalid_contents(f"Invalid characters found: the parameter {key[:100]!r} must not contain "
                                          "the NUL character (U+0000).")
        node = root
        for part in key.split("."):
            node = node.children.setdefault(part, _Node())
        if node.value is not None:
            raise errors.invalid_parameter(f"The parameter {key[:100]} is given more than once.")
        node.value = value
    action, version = (_envelope(root, name) for name in ("Action", "Version"))
    if not action:
        raise errors.NoOperation()
    if version not in (None, VERSION):
        raise errors.invalid_parameter(f"Version {version[:40]} is not served; Postbox speaks SQS's {VERSION}.")
    model = service_model()
    if action not in model.operation_names:
        raise errors.unknown_action(action)
    shape = model.input_shape(action)
    return action, (_structure(shape, root, "") if shape is not None else _refuse_all(root))


def _envelope(root: _Node, name: str) -> str | None:
    """The value of one of the parameters every action takes (`Action`, `Version`), taken out."""
    node = root.children.pop(name, _Node())
    for part in node.children:
        raise _unknown(f"{name}.{part}")
    return node.value


def _refuse_all(node: _Node) -> dict[str, Any]:
    for name in node.children:
        raise _unknown(name)
    return {}


def _unknown(name: str) -> errors.SqsError:
    return errors.invalid_parameter(f"Unknown parameter {name[:100]}.")


def _wire_names(shape) -> dict[str, str]:
    """A structure's members by the names the Query protocol gives them (a flattened list by its
    element's name, and by its own for an empty list)."""
    names = {}
    for member, member_shape in shape.members.items():
        names[member_shape.serialization.get("name", member)] = member
        if member_shape.type_name == "list" and member_shape.serialization.get("flattened"):
            names[member_shape.member.serialization.get("name", member)] = member
    return names


def _decode(shape, node: _Node, path: str) -> Any:
    kind = shape.type_name
    if kind == "structure":
        return _structure(shape, node, path + ".")
    if kind == "list":
        return _list(shape, node, path)
    if kind == "map":
        return _map(shape, node, path)
    for name in node.children:
        raise _unknown(f"{path}.{name}")
    if kind in ("integer", "long") and _INTEGER.fullmatch(node.value):
        return int(node.value)
    if kind == "boolean" and node.value in ("true", "false"):
        return node.value == "true"
    return node.value  # a string, a blob as base64 (as JSON carries it), or what the action refuses


def _structure(shape, node: _Node, prefix: str) -> dict[str, Any]:
    if node.value is not None:
        raise errors.invalid_parameter(f"The parameter {prefix.rstrip('.')[:100]} takes members, not a value.")
    names = _wire_names(shape)
    out: dict[str, Any] = {}
    for name, child in node.children.items():
        member = names.get(name)
        if member is None:
            raise _unknown(prefix + name)
        if member in out:
            raise errors.invalid_parameter(f"The parameter {prefix}{name[:100]} is given more than once.")
        out[member] = _decode(shape.members[member], child, prefix + name)
    return out


def _numbered(node: _Node, path: str) -> list[tuple[str, _Node]]:
    """The entries `path.1`, `path.2`, … in their numbers' order."""
    for name in node.children:
        if not _INDEX.fullmatch(name):
            raise _unknown(f"{path}.{name}")
    return sorted(node.children.items(), key=lambda item: int(item[0]))


def _list(shape, node: _Node, path: str) -> list[Any]:
    if not node.children and not node.value:
        return []  # how the protocol writes an empty list
    if not shape.serialization.get("flattened"):
        name = shape.member.serialization.get("name", "member")
        if set(node.children) - {name}:
            raise _unknown(f"{path}.{next(iter(set(node.children) - {name}))}")
        node, path = node.children.get(name, _Node()), f"{path}.{name}"
    if node.value is not None:
        raise errors.invalid_parameter(f"The parameter {path[:100]} takes numbered entries ({path[:100]}.1, …).")
    return [_decode(shape.member, item, f"{path}.{i}") for i, item in _numbered(node, path)]


def _map(shape, node: _Node, path: str) -> dict[str, Any]:
    if not shape.serialization.get("flattened"):
        for name in set(node.children) - {"entry"}:
            raise _unknown(f"{path}.{name}")
        node, path = node.children.get("entry", _Node()), f"{path}.entry"
    key_name = shape.key.serialization.get("name", "key")
    value_name = shape.value.serialization.get("name", "value")
    out: dict[str, Any] = {}
    for i, entry in _numbered(node, path):
        where = f"{path}.{i}"
        for name in set(entry.children) - {key_name, value_name}:
            raise _unknown(f"{where}.{name}")
        key, value = entry.children.get(key_name), entry.children.get(value_name)
        if key is None or key.value is None:
            raise errors.missing_parameter(f"{where}.{key_name}")
        if value is None:
            raise errors.missing_parameter(f"{where}.{value_name}")
        if key.value in out:
            raise errors.invalid_parameter(f"{key_name} {key.value[:100]} is given more than once in {path[:100]}.")
        out[key.value] = _decode(shape.value, value, f"{where}.{value_name}")
    return out


# ---- answers ----------------------------------------------------------------------------------


def _escape(text: str) -> str:
    return _ESCAPED.sub(lambda m: _ESCAPES.get(m.group(), "\ufffd"), text)


def answer(action: str, result: dict[str, Any], request_id: str) -> str:
    """SQS's XML answer to `action`, its result written by the action's output shape."""
    out = [f'<?xml version="1.0"?><{action}Response xmlns="{XML_NAMESPACE}">']
    shape = service_model().output_shape(action)
    if shape is not None and not any(value is not None for value in result.values()):
        out.append(f"<{action}Result/>")  # as SQS writes a result with nothing in it (an empty receive)
    elif shape is not None:
        _element(out, shape, result, f"{action}Result")
    out.append(f"<ResponseMetadata><RequestId>{_escape(request_id)}</RequestId></ResponseMetadata>"
               f"</{action}Response>")
    return "".join(out)


def failure(error: errors.SqsError, request_id: str) -> str:
    """SQS's XML error: its Query code, whose fault it is and the Query protocol's wording."""
    if isinstance(error, errors.NoOperation):
        return "<UnknownOperationException/>"
    return (f'<?xml version="1.0"?><ErrorResponse xmlns="{XML_NAMESPACE}"><Error>'
            f"<Type>{error.fault}</Type><Code>{_escape(error.query_code)}</Code>"
            f"<Message>{_escape(error.query_message)}</Message><Detail/></Error>"
            f"<RequestId>{_escape(request_id)}</RequestId></ErrorResponse>")


def _element(out: list[str], shape, value: Any, name: str) -> None:
    kind = shape.type_name
    out.append(f"<{name}>")
    if kind == "structure":
        for member in value.keys() - shape.members.keys():
            raise ValueError(f"{shape.name} has no member {member}")  # the action's answer and the model disagree
        for member, member_shape in shape.members.items():  # in the model's order, as SQS writes them
            if value.get(member) is not None:
                _member(out, member_shape, value[member], member)
    elif kind == "list":
        _items(out, shape, value, shape.member.serialization.get("name", "member"))
    elif kind == "map":
        _entries(out, shape, value, "entry")
    else:
        out.append(_scalar(kind, value))
    out.append(f"</{name}>")


def _member(out: list[str], shape, value: Any, member: str) -> None:
    name = shape.serialization.get("name", member)
    if shape.type_name == "list" and shape.serialization.get("flattened"):
        _items(out, shape, value, shape.member.serialization.get("name", name))
    elif shape.type_name == "map" and shape.serialization.get("flattened"):
        _entries(out, shape, value, name)
    else:
        _element(out, shape, value, name)


def _items(out: list[str], shape, value: list[Any], name: str) -> None:
    for item in value:
        _element(out, shape.member, item, name)


def _entries(out: list[str], shape, value: dict[str, Any], name: str) -> None:
    key_name = shape.key.serialization.get("name", "key")
    value_name = shape.value.serialization.get("name", "value")
    for key, item in value.items():
        out.append(f"<{name}><{key_name}>{_escape(key)}</{key_name}>")
        _element(out, shape.value, item, value_name)
        out.append(f"</{name}>")


def _scalar(kind: str, value: Any) -> str:
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "blob" and isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    return _escape(str(value))
