"""The `migrate` function: applies pending migrations (invoked by the Pulumi stack on deploy).

It is also the operator's door to a database nothing public can reach: invoked with
`{"action": "create-tenant", "name": ..., "plan": ..., "cell": ...}` it creates a tenant (on the cell
named, else on the one with the most room) and returns its first `manage` key; with
`{"action": "create-key", "tenant": ..., "role": ..., "project": ...}` another key; with
`{"action": "set-plan", "tenant": ..., "plan": ...}` it puts the tenant on another plan; with
`{"action": "cells"}` it lists the cells, each with its schema version and its tenants; with
`{"action": "tenant-move", "tenant": ..., "cell": ...}` it moves the tenant live to that cell (or
continues its unfinished move there) and returns the move's report. A command that names a tenant
runs on the tenant's cell.

On AWS it also holds the keys to the database roles: each run gives the application secret and the
encryption key ring their first value if they have none and (re)applies the roles' logins, and
Secrets Manager calls it to rotate both secrets (functions/rotation.py).

Cells: the deploy invokes it once per cell, the event naming the cell (`{"cell": name}`): it
migrates that cell and fills that cell's application secret, so one slow cell never times out
another's run. An event naming no cell migrates every cell in turn (one cell: as before cells).
"""

from __future__ import annotations

import os
from typing import Any

from functions import rotation
from functions.observability import instrument
from postbox import cells, db, directory, errors, migrate, moves, tenancy

logger, metrics, lambda_handler = instrument("migrate")


def _create_tenant(event: dict) -> dict:
    tenant_id = tenancy.create_tenant(event["name"], plan=event.get("plan", "free"), cell=event.get("cell"))
    with directory.at(tenant_id) as cell:
        issued = tenancy.create_key(tenant_id, "manage", name="first key")
    return {"tenant_id": tenant_id, "cell": cell.name, "key": issued.key, "key_id": issued.key_id}


def _create_key(event: dict) -> dict:
    with tenancy.on_tenant(event["tenant"]) as tenant_id:
        issued = tenancy.create_key(tenant_id, event.get("role", "write"), project=event.get("project"),
                                    name=event.get("key_name", ""))
    return {"key": issued.key, "key_id": issued.key_id, "role": issued.role}


def _set_plan(event: dict) -> dict:
    return tenancy.set_plan(event["tenant"], event["plan"])


def _manages_secrets() -> bool:
    return bool(os.environ.get(rotation.APP_SECRET) or os.environ.get(rotation.KEYS_SECRET))


def _cells(event: dict) -> dict:
    return {"cells": directory.report()}


def _tenant_move(event: dict) -> dict:
    """The move runs within the invocation (a million messages took about 30 s: well within the
    function's 15 minutes); an invocation cut short is continued by the next with the same fields."""
    return {"moved": moves.move(event["tenant"], event["cell"])}


_ACTIONS = {"create-tenant": _create_tenant, "create-key": _create_key, "set-plan": _set_plan, "cells": _cells,
            "tenant-move": _tenant_move}


def _migrate_here() -> tuple[list[str], dict[str, str]]:
    """Apply the migrations to the current cell and give its secrets their first value."""
    applied = migrate.apply(db.conninfo())
    logger.info("migrations applied", extra={"applied": applied, "cell": cells.current().name})
    return applied, (rotation.bootstrap() if _manages_secrets() else {})


def _migrate(event: dict) -> dict:
    """The cell the event names, or every cell: `applied` is that cell's list, or by cell."""
    named = event.get("cell")
    if named is not None:
        try:
            cell = cells.named(named)
        except KeyError:  # a deploy naming a cell this function was not told of must fail
            raise ValueError(f"no cell named {named!r}; cells: {', '.join(c.name for c in cells.all_cells())}"
                             ) from None
        with cells.use(cell):
            applied, secrets = _migrate_here()
        return {"cell": cell.name, "applied": applied, **({"secrets": secrets} if secrets else {})}
    if not cells.several():
        applied, secrets = _migrate_here()
        return {"applied": applied, **({"secrets": secrets} if secrets else {})}
    done: dict[str, list[str]] = {}
    for cell in cells.each():
        done[cell.name], _ = _migrate_here()
    return {"applied": done}


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    event = event or {}
    if "Step" in event and "SecretId" in event:  # Secrets Manager rotating a secret
        logger.info("rotation step", extra={"step": event["Step"], "secret": event["SecretId"]})
        rotation.rotate(event)
        return {"rotated": event["Step"]}
    action = event.get("action", "migrate")
    done = _migrate(event if action == "migrate" else {})  # an action's own `cell` is where it acts
    if action == "migrate":
        return done
    if action not in _ACTIONS:
        return {"error": f"unknown action {action!r}; one of migrate, {', '.join(_ACTIONS)}"}
    try:
        return {"applied": done["applied"], **_ACTIONS[action](event)}
    except (KeyError, errors.PostboxError) as e:
        return {"error": getattr(e, "message", f"missing field {e}")}
