"""Wire the components together; `build()` is the whole program and returns the stack outputs.

Kept apart from __main__.py so the tests can run it under Pulumi mocks as often as they like.
"""

from __future__ import annotations

import pulumi

from functions import routes as route_table
from infra import (
    alarms,
    api,
    cells,
    dashboard,
    exports,
    failures,
    function_urls,
    functions,
    layers,
    migrate,
    network,
    schedules,
    secrets,
    settings,
    streaming,
)


def build() -> dict[str, pulumi.Input]:
    s = settings.load()
    net = network.build(s)
    owned = secrets.build(s)
    stack_cells = cells.build(s, net)
    db = stack_cells[0].db  # the default cell's: the outputs from before cells
    lyr = layers.build(s)
    failed_runs = failures.build(s)

    def run_migrations(fn: functions.Deployed) -> list[pulumi.Resource]:
        return [migrate.build(fn, cell, s.cells_named) for cell in stack_cells]

    export_bucket = exports.build(s)
    fns = functions.build(s, net, stack_cells, lyr, owned, failed_runs, run_migrations, export_bucket)
    secrets.rotate(s, owned, stack_cells, fns[functions.MIGRATE].function)
    # The front door: one API Gateway HTTP API in front of every surface, or each surface's own URL.
    http = api.build(s, fns) if s.front_door == settings.API_GATEWAY else None
    urls = function_urls.build(s, fns) if http is None else None
    # Beside the HTTP API, which buffers, a REST API route that streams the durable surface (a function
    # URL door streams on the durable surface's own URL).
    durable = fns["durable"]
    durable_stream_url = (streaming.build_rest_api(s, durable.function, durable.arn, durable.qualifier)
                          if http is not None and s.durable_streaming_api else None)
    schedules.build(s, fns, failed_runs, stack_cells)
    topic = alarms.build(s, http, fns, stack_cells, failed_runs)
    board = dashboard.build(s, http, stack_cells, failed_runs)
    return {
        "front_door": s.front_door,
        # One base URL for the stack (API Gateway), or none and one per surface (function URLs).
        "api_url": http.url if http else None,
        "surface_urls": function_urls.base_urls(urls) if urls else http.url.apply(
            lambda u: {name: u.rstrip("/") for name in route_table.FUNCTIONS}),
        "db_proxy_endpoint": db.endpoint,
        "db_secret_arn": db.secret_arn,
        "db_app_secret_arn": stack_cells[0].app_secret.arn,
        "encryption_keys_secret_arn": owned.keys.arn,
        "function_names": {name: d.function.name for name, d in fns.items()},
        "migrations_sha256": stack_cells[0].migration.triggers.apply(lambda t: (t or {}).get("migrations_sha256")),
        "alarm_topic_arn": topic.arn,
        "agent_failures_queue_url": failed_runs.url,
        "dashboard_name": board.dashboard_name,
        "export_bucket": export_bucket.bucket,
        "durable_stream_url": durable_stream_url,
        # Each cell by name, the default first (the outputs above are the default cell's).
        "cells": pulumi.Output.all(*[c.outputs() for c in stack_cells]).apply(
            lambda found: {c.spec.name: o for c, o in zip(stack_cells, found, strict=True)}),
    }
