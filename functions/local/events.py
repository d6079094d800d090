"""Build the API Gateway HTTP API (payload 2.0) events a request becomes (or a Lambda function URL's,
which share the format), and read responses back.

The local gateway and the handler tests both use these, so what the handlers see locally is
what API Gateway would send them.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from functions.routes import Route
from functions.streaming import StreamedBody

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript",
               "application/x-www-form-urlencoded", "application/x-ndjson")


_ID_PREFIX = os.urandom(8)
_ID_COUNTER = itertools.count()


def request_id() -> str:
    """A request id shaped as API Gateway's HTTP API ones (`requestContext.requestId`, the
    `apigw-requestid` header: 11 bytes in base64, e.g. `JKJaXmPLvHcESHA=`), unique to this process
    and across processes without a system call per request: a random per-process prefix (5 bytes)
    and a counter (6 bytes)."""
    return base64.b64encode(_ID_PREFIX[:5] + (next(_ID_COUNTER) & 0xFFFFFFFFFFFF).to_bytes(6, "big")).decode()


FUNCTION_URL_ID = "local0000000000000000000000000000"  # a function URL's id: 32 characters


def function_url_request_id() -> str:
    """A function URL request id: a UUID (Lambda's invocation id), from the same prefix and counter."""
    h = invocation_id()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def invocation_id() -> str:
    """A Lambda invocation id (the context's `aws_request_id`) of this process: 32 hex digits, as
    uuid4().hex, from the same prefix and counter."""
    return f"{_ID_PREFIX.hex()}{next(_ID_COUNTER) & 0xFFFFFFFFFFFFFFFF:016x}"


def is_text(content_type: str | None) -> bool:
    ct = (content_type or "").lower()
    return not ct or ct.startswith(_TEXT_TYPES) or ct.endswith("+json") or ct.endswith("+xml")


def _join(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """API Gateway folds repeated headers and query parameters into one comma-joined value: joined
    once per name at the end (appending to the value at each repeat copies it, quadratic in the
    repeats)."""
    out: dict[str, str] = {}
    repeats: dict[str, list[str]] = {}
    for k, v in pairs:
        if k in out:
            repeats.setdefault(k, [out[k]]).append(v)
        else:
            out[k] = v
    for k, values in repeats.items():
        out[k] = ",".join(values)
    return out


def http_event(
    method: str,
    path: str,
    *,
    query: str = "",
    headers: list[tuple[str, str]] | dict[str, str] | None = None,
    body: bytes | str | None = None,
    route: Route | None = None,
    path_parameters: dict[str, str] | None = None,
    authorizer: dict[str, Any] | None = None,
    source_ip: str = "127.0.0.1",
    function_url: bool = False,
) -> dict[str, Any]:
    """The event API Gateway's HTTP API sends, or with `function_url` the one a Lambda function URL
    sends (the same payload 2.0 shape, with no route: `routeKey` is `$default`, no `pathParameters`,
    the URL's id where the API's is, and a request id that is a UUID)."""
    if function_url:
        route, path_parameters = None, None
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    pairs = [(k.lower(), v) for k, v in pairs]
    cookies = [c.strip() for k, v in pairs if k == "cookie" for c in v.split(";") if c.strip()]
    header_map = _join([(k, v) for k, v in pairs if k != "cookie"])
    now = time.time()
    route_key = route.route_key if route else "$default"
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": header_map,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "domainName": header_map.get("host", "localhost"),
            "domainPrefix": "local",
            "http": {
                "method": method.upper(),
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": header_map.get("user-agent", ""),
            },
            "requestId": function_url_request_id() if function_url else request_id(),
            "routeKey": route_key,
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if function_url:
        context = event["requestContext"]
        context.update(apiId=FUNCTION_URL_ID, domainPrefix=FUNCTION_URL_ID,
                       domainName=f"{FUNCTION_URL_ID}.lambda-url.us-east-1.on.aws")
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = _join(parse_qsl(query, keep_blank_values=True))
    if path_parameters:
        event["pathParameters"] = path_parameters
    if authorizer is not None:
        event["requestContext"]["authorizer"] = {"lambda": authorizer}
    if body:
        raw = body.encode() if isinstance(body, str) else body
        if is_text(header_map.get("content-type")):
            try:
                event["body"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                event["body"], event["isBase64Encoded"] = base64.b64encode(raw).decode(), True
        else:
            event["body"], event["isBase64Encoded"] = base64.b64encode(raw).decode(), True
    return event


@dataclass
class HttpResponse:
    """An answer; its body is written chunk by chunk when it is a StreamedBody (an open SSE read)."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | StreamedBody = b""

    def json(self) -> Any:
        return json.loads(self.body)


def json_message(status: int, text: str) -> HttpResponse:
    """An answer of API Gateway's own, `{"message": text}` (404, 413, 500, ...)."""
    return HttpResponse(status, [("content-type", "application/json")], json.dumps({"message": text}).encode())


def read_response(result: Any) -> HttpResponse:
    """Turn a Lambda result into an HTTP answer as API Gateway does (payload 2.0 rules)."""
    if not isinstance(result, dict) or "statusCode" not in result:
        body = result if isinstance(result, str) else json.dumps(result)
        return HttpResponse(200, [("content-type", "application/json")], body.encode())
    headers = [(k.lower(), str(v)) for k, v in (result.get("headers") or {}).items()]
    for k, values in (result.get("multiValueHeaders") or {}).items():
        headers.extend((k.lower(), str(v)) for v in values)
    headers.extend(("set-cookie", c) for c in result.get("cookies") or [])
    body = result.get("body") or ""
    if isinstance(body, StreamedBody):
        return HttpResponse(int(result["statusCode"]), headers, body)
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else body.encode()
    return HttpResponse(int(result["statusCode"]), headers, raw)
