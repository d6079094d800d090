"""`postbox dev`'s request log: one line per request (method, path, status, milliseconds, tenant, and
for a failure the id its answer showed, which its functions' log lines carry as `correlation_id`),
so a newcomer sees what their client sent and what it got without reading Powertools' JSON logs.

On by default in `postbox dev` (`--quiet` or `POSTBOX_REQUEST_LOG=0` silences it), off in tests and
wherever a `LocalGateway` is built without it. Every gateway worker process writes its own lines.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

ENV = "POSTBOX_REQUEST_LOG"
logger = logging.getLogger("postbox.requests")
_names: dict[str, str] = {}


def enabled() -> bool:
    """Whether the environment asks for the log (`postbox dev` sets it for its worker processes)."""
    return os.environ.get(ENV, "0").strip().lower() not in ("", "0", "false", "no", "off")


def install(stream: TextIO | None = None) -> None:
    """Send the lines to `stream` (stderr), time-stamped, apart from the root logger's other output."""
    if not any(getattr(h, "_postbox_requests", False) for h in logger.handlers):
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
        handler._postbox_requests = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def tenant_label(tenant_id: str | None) -> str:
    """The tenant's name (looked up once per tenant and process), `-` for a request without a key."""
    if not tenant_id:
        return "-"
    name = _names.get(tenant_id)
    if name is None:
        try:
            from postbox import tenancy

            name = tenancy.tenant_name(tenant_id) or tenant_id
        except Exception:  # the log never fails a request
            name = tenant_id
        _names[tenant_id] = name
    return name


def request_id_of(headers: list[tuple[str, str]]) -> str | None:
    """The id an answer showed its caller (`x-request-id`, else API Gateway's `apigw-requestid`):
    the `correlation_id` of the function's log lines for that request."""
    found = dict(headers)
    return found.get("x-request-id") or found.get("apigw-requestid")


def line(method: str, path: str, status: int, ms: float, tenant_id: str | None, request_id: str | None = None) -> str:
    """The request's line; a failed one (`request_id` given) ends with ` id=<its X-Request-Id>`."""
    text = f"{method} {path} {status} {ms:.1f} ms tenant={tenant_label(tenant_id)}"
    return f"{text} id={request_id}" if request_id else text


def record(method: str, path: str, status: int, ms: float, tenant_id: str | None,
           request_id: str | None = None) -> None:
    logger.info(line(method, path, status, ms, tenant_id, request_id))
