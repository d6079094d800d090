"""The API's documentation on the local gateway: `/openapi.json` and Swagger UI at `/docs`.

Swagger UI's files come from the `swagger-ui-bundle-v2` package (the `local` extra), so the page
works offline; the document is generated once per gateway from the resolvers (`functions.openapi`).
"""

from __future__ import annotations

import mimetypes
from functools import lru_cache

from functions.local.events import HttpResponse

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Postbox API</title>
  <link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script>
    window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true,
                                 persistAuthorization: true});
  </script>
</body>
</html>
"""

_ASSETS = ("swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png")


@lru_cache(maxsize=1)
def _document() -> bytes:
    from functions import openapi

    return openapi.dumps(openapi.document()).encode()


@lru_cache(maxsize=len(_ASSETS))
def _asset(name: str) -> bytes | None:
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:  # the `local` extra is not installed: the page says so
        return None
    return (swagger_ui_path / name).read_bytes()


def serve(method: str, path: str) -> HttpResponse | None:
    """The answer for a documentation path, or None when the path is not one."""
    if method not in ("GET", "HEAD"):
        return None
    if path == "/openapi.json":
        return HttpResponse(200, [("content-type", "application/json")], _document())
    if path in ("/docs", "/docs/"):
        return HttpResponse(200, [("content-type", "text/html; charset=utf-8")], _PAGE.encode())
    name = path.removeprefix("/docs/")
    if path.startswith("/docs/") and name in _ASSETS:
        data = _asset(name)
        if data is None:
            return HttpResponse(404, [("content-type", "text/plain")], b"Swagger UI needs the swagger-ui-bundle-v2 "
                                b"package (pip install 'postbox[local]').")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return HttpResponse(200, [("content-type", kind), ("cache-control", "max-age=3600")], data)
    return None
