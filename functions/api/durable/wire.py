"""The durable surface's wire helpers: request headers parsed into domain values, the headers every
answer carries, error answers with their protocol headers, read bodies and SSE events."""

from __future__ import annotations

import base64
import json
import os
import re
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.event_handler import Response

from postbox.durable import jsontext
from postbox.durable.model import Producer, is_json
from postbox.durable.offsets import format_offset, parse_offset
from postbox.errors import Invalid, PostboxError, TooLarge

MAX_BODY = 4 * 1024 * 1024  # base64 in the Lambda event, it stays inside Lambda's 6 MB payload
MAX_READ = int(os.environ.get("POSTBOX_DURABLE_READ_BYTES", str(4 * 1024 * 1024)))

CORS = {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "GET, POST, PUT, DELETE, HEAD, OPTIONS",
    "access-control-allow-headers": (
        "content-type, authorization, apikey, if-none-match, accept, Stream-Seq, Stream-TTL, Stream-Expires-At,"
        " Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset,"
        " Stream-Fork-Sub-Offset, Stream-Incarnation, Stream-Snapshot-Parts, Postbox-Public"
    ),
    "access-control-expose-headers": (
        "Stream-Next-Offset, Stream-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Producer-Epoch,"
        " Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, ETag, Content-Type, Stream-Incarnation,"
        " Stream-Snapshot-Digest, Stream-Snapshot-Part, Stream-Snapshot-Offset, Stream-Retained-Offset,"
        " Stream-Immutable, Stream-SSE-Data-Encoding, Retry-After, Ursula-Protocol, Ursula-Cluster-Id"
    ),
    "x-content-type-options": "nosniff",
    "cross-origin-resource-policy": "cross-origin",
}
# A stream's bytes go out with the content type its writer chose, from the API's own origin (the
# console's too): a browser opening one as a page (`text/html`, `image/svg+xml`) renders it in a
# sandbox, an origin of its own that runs no script and loads nothing, so a public stream of one
# tenant cannot act as the API's origin towards another tenant's console session.
SANDBOX = {"content-security-policy": "sandbox; default-src 'none'"}
URSULA = {
    "ursula-protocol": "11",
    "ursula-cluster-id": os.environ.get("POSTBOX_CLUSTER_ID", "postbox"),
}
_WHOLE = re.compile(r"^(0|[1-9]\d*)$")
_UINT = re.compile(r"^\d+$")
_INCARNATION = re.compile(r"^[0-9a-f]{16}$")
_SAFE_INT = 2**53 - 1
# Far beyond any use, and inside PostgreSQL's timestamps when added to now (about 31,700 years).
MAX_TTL_SECONDS = 10**12
# The protocol's names for the shared permission check's refusals, and for a caller's cap of waits.
_WIRE_CODES = {"unauthorized": "INVALID_CREDENTIAL", "forbidden": "FORBIDDEN", "too_many_waits": "LIVE_READS_EXHAUSTED"}


def error_body(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":"))


def error_response(error: PostboxError) -> Response:
    """`{"error":{"code","message"}}` with the headers the protocol puts on each refusal."""
    d = error.details
    headers: dict[str, str] = {}
    if d.get("closed"):
        headers["Stream-Closed"] = "true"
    if d.get("next_offset") is not None:
        headers["Stream-Next-Offset"] = format_offset(d["next_offset"])
    if d.get("current_epoch") is not None:
        headers["Producer-Epoch"] = str(d["current_epoch"])
    if d.get("expected_seq") is not None:
        headers["Producer-Expected-Seq"] = str(d["expected_seq"])
        headers["Producer-Received-Seq"] = str(d["received_seq"])
    if d.get("incarnation"):
        headers["Stream-Incarnation"] = d["incarnation"]
    if error.code.startswith("PRODUCER_") or error.code == "INVALID_PRODUCER":
        headers["Producer-Outcome"] = "rejected"
    if error.status in (429, 503):
        headers["Retry-After"] = str(d.get("retry_after", 1))
    if error.status == 413:
        headers["Ursula-Max-Request-Bytes"] = str(MAX_BODY)
    code = _WIRE_CODES.get(error.code, error.code)
    if "limit" in d:  # a plan limit, named in the protocol's case: MAX_DURABLE_STREAMS
        code = code.upper()
    return Response(error.status, "application/json", error_body(code, error.message), headers)


def header(headers: dict[str, str], name: str) -> str | None:
    return headers.get(name.lower())


def is_true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def body_of(event: dict[str, Any]) -> bytes:
    raw = event.get("body") or ""
    data = base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode()
    if len(data) > MAX_BODY:
        raise TooLarge(f"A request body is at most {MAX_BODY} bytes.", code="REQUEST_TOO_LARGE")
    return data


def ttl_of(value: str | None) -> int | None:
    if value is None:
        return None
    if not _WHOLE.match(value.strip()):
        raise Invalid("Stream-TTL must be a whole number of seconds.", code="INVALID_HEADER")
    if not _fits(value.strip(), MAX_TTL_SECONDS):
        raise Invalid(f"Stream-TTL is at most {MAX_TTL_SECONDS} seconds.", code="INVALID_HEADER")
    return int(value)


def _fits(digits: str, limit: int) -> bool:
    """A whole number's digits at most `limit` (counted before converting: a huge one is refused cheaply)."""
    return len(digits) <= len(str(limit)) and int(digits) <= limit


def whole_number(value: str, limit: int = _SAFE_INT) -> int | None:
    """A header's non-negative whole number up to `limit` (no sign, no leading zero), else None."""
    text = value.strip()
    return int(text) if _WHOLE.match(text) and _fits(text, limit) else None


def expires_of(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        raise Invalid("Stream-Expires-At must be an RFC 3339 timestamp.", code="INVALID_HEADER") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def producer_of(headers: dict[str, str]) -> Producer | None:
    pid, epoch, seq = (header(headers, h) for h in ("producer-id", "producer-epoch", "producer-seq"))
    if pid is None and epoch is None and seq is None:
        return None
    if pid is None or epoch is None or seq is None:
        raise Invalid("Producer-Id, Producer-Epoch and Producer-Seq come together.", code="INVALID_PRODUCER")
    if pid == "" or len(pid.encode()) > 256 or "\x00" in pid:
        raise Invalid("Producer-Id is 1 to 256 bytes.", code="INVALID_PRODUCER")
    for value in (epoch, seq):
        if not _UINT.match(value) or not _fits(value.lstrip("0") or "0", _SAFE_INT):
            raise Invalid("Producer-Epoch and Producer-Seq are non-negative integers.", code="INVALID_PRODUCER")
    return Producer(pid, int(epoch), int(seq))


def stream_name_of(value: str) -> str:
    """A stream's name from its URL: 1 to 512 bytes, no control characters (400 otherwise)."""
    if not value or len(value.encode()) > 512 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise Invalid("A stream name is 1 to 512 bytes without control characters.", code="INVALID_STREAM_ID")
    return value


def offset_of(value: str) -> int:
    position = parse_offset(value)
    if position is None:
        raise Invalid("Not an offset this stream gave.", code="INVALID_OFFSET")
    return position


def incarnation_of(headers: dict[str, str]) -> str | None:
    value = header(headers, "stream-incarnation")
    if value is None:
        return None
    if not _INCARNATION.match(value.strip()):
        raise Invalid("Stream-Incarnation is not a value this server gives.", code="INVALID_HEADER")
    return value.strip()


def wants_ndjson(headers: dict[str, str]) -> bool:
    return "application/x-ndjson" in (header(headers, "accept") or "").lower()


def read_body(content_type: str, payloads: list[bytes], ndjson: bool) -> tuple[bytes, str]:
    """The body of a catch-up read and its content type: JSON streams as an array or NDJSON."""
    if is_json(content_type):
        if ndjson:
            return jsontext.as_ndjson(payloads), "application/x-ndjson"
        return jsontext.as_array(payloads), content_type
    return b"".join(payloads), content_type


def sse_event(kind: str, data: str) -> str:
    """One SSE event; every line of the data gets its own `data:` field, so no payload can end an
    event or start another (CR, LF and CRLF all count as line ends). A line that starts with a space
    gets one more, which the client's parser strips."""
    lines = re.split(r"\r\n|\r|\n", data)
    return f"event: {kind}\n" + "".join(f"data: {line}\n" if line[:1] == " " else f"data:{line}\n"
                                         for line in lines) + "\n"


def sse_data(content_type: str, payload: bytes, binary: bool) -> str:
    if binary:
        return base64.b64encode(payload).decode()
    if is_json(content_type):
        return jsontext.as_array([payload]).decode()
    return payload.decode("utf-8", errors="replace")


def sse_is_binary(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return not (media.startswith("text/") or media == "application/json")
