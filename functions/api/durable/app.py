"""The durable surface: the Durable Streams protocol at `/v1/stream/{name}` and the hosted form at
`/{account}/s.{name}` (JSON read as NDJSON, Stream-Incarnation, snapshots, retention, bootstrap,
cacheable chunks, public streams), every route a row of `functions/routes.py`.

`resolver` holds the resolver and what every answer shares, `verbs` the verbs both forms
answer, `open_form` and `hosted` each form's routes, `wire` the wire format's helpers, `openapi`
the surface in OpenAPI terms; the rules live in `postbox.durable`."""

from __future__ import annotations

from typing import Any

from functions.api.durable import hosted, open_form
from functions.api.durable.resolver import app
from functions.observability import instrument

logger, metrics, lambda_handler = instrument("durable", resolve_keys=True)

# The open form first: like API Gateway, the resolver must prefer `/v1/stream/{name}` to the
# hosted form's `/{account}/{stream}/...` rows where both match (`/v1/stream/bootstrap`).
app.include_router(open_form.router)
app.include_router(hosted.router)


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
