"""The durable surface: the Durable Streams protocol at `/v1/stream/{name}` and the hosted form at
`/{account}/s.{name}` (JSON read as NDJSON, Stream-Incarnation, snapshots, retention, bootstrap,
cacheable chunks, public streams), every route a row of `functions/routes.py`.

`durable_app` holds the resolver and what every answer shares, `durable_verbs` the verbs both
forms answer, `durable_open` and `durable_hosted` each form's routes, `durable_http` the wire
helpers; the rules live in `postbox.durable`."""

from __future__ import annotations

from typing import Any

from functions.api import durable_hosted, durable_open
from functions.api.durable_app import app
from functions.observability import instrument

logger, metrics, lambda_handler = instrument("durable")

# The open form first: like API Gateway, the resolver must prefer `/v1/stream/{name}` to the
# hosted form's `/{account}/{stream}/...` rows where both match (`/v1/stream/bootstrap`).
app.include_router(durable_open.router)
app.include_router(durable_hosted.router)


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
