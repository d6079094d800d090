"""The `migrate` function: applies pending migrations; invoked by the Pulumi stack on deploy."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox import db, migrate

logger, metrics, lambda_handler = instrument("migrate")


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    applied = migrate.apply(db.conninfo())
    logger.info("migrations applied", extra={"applied": applied})
    return {"applied": applied}
