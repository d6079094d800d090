"""The web console (`/console`): static files (HTML, JS, CSS) from this package's `static/` folder,
served by a function of its own on the same API, so the stack deploys it from the route table like any surface.

The pages need no credential to load; they ask for an API key and call the surfaces' routes with it
from the browser. Only files of the console folder with a known type are served; nothing is read
from outside it, whatever the path says.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler import Response

from functions.api.request_local import RequestLocalResolver
from functions.observability import instrument

logger, metrics, lambda_handler = instrument("console")

ASSETS = Path(__file__).resolve().parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8"}
SECURITY = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

app = RequestLocalResolver()  # the local gateway serves it from several threads at once


@cache
def _asset(name: str) -> tuple[str, str] | None:
    """(content type, text) of a console file, or None when there is no such servable file."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    path = ASSETS / name
    kind = TYPES.get(path.suffix)
    if kind is None or not path.is_file():
        return None
    return kind, path.read_text(encoding="utf-8")


def _serve(name: str) -> Response:
    found = _asset(name)
    if found is None:
        return Response(404, "text/plain; charset=utf-8", "Not Found", headers=SECURITY)
    return Response(200, found[0], found[1], headers=SECURITY)


@app.get("/console")
def index() -> Response:
    return _serve("index.html")


@app.get("/console/<asset>")
def asset(asset: str) -> Response:
    return _serve(asset or "index.html")


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
