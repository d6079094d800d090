"""Routes of the work surface's registries: routing rules, message schemas, HITL patterns.

Parses and shapes only; the rules, validation and expansion live in `postbox.work`.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from functions.api.work_envelope import caller, data
from functions.api.work_registry_schema import (
    CreateRule,
    DryRun,
    ExpandPattern,
    QueueSchema,
    RegisterPattern,
    RegisterSchema,
    UpdateRule,
    ValidatePayload,
)
from postbox.work import hitl, routing, schemas

router = Router()
QUEUE = "/scopes/<scope_id>/queues/<queue_id>"

# ---- routing rules ------------------------------------------------------------------------------

RULES = "/scopes/<scope_id>/routing-rules"


@router.post(RULES)
def create_rule(scope_id: str, body: Annotated[CreateRule, Body()]):
    return data(routing.create_rule(caller(), scope_id, body.fields()), 201)


@router.get(RULES)
def list_rules(scope_id: str):
    return data(routing.list_rules(caller(), scope_id))


@router.post(RULES + "/test")
def test_rules(scope_id: str, body: Annotated[DryRun, Body()]):
    return data(routing.dry_run(caller(), scope_id, body.trigger, body.message.fields()))


@router.get(RULES + "/<rule_id>")
def get_rule(scope_id: str, rule_id: str):
    return data(routing.get_rule(caller(), scope_id, rule_id))


@router.patch(RULES + "/<rule_id>")
def update_rule(scope_id: str, rule_id: str, body: Annotated[UpdateRule, Body()]):
    return data(routing.update_rule(caller(), scope_id, rule_id, body.fields()))


@router.delete(RULES + "/<rule_id>")
def delete_rule(scope_id: str, rule_id: str):
    routing.delete_rule(caller(), scope_id, rule_id)
    return data({"id": rule_id, "deleted": True})


@router.post(RULES + "/<rule_id>/enable")
def enable_rule(scope_id: str, rule_id: str):
    return data(routing.update_rule(caller(), scope_id, rule_id, {"enabled": True}))


@router.post(RULES + "/<rule_id>/disable")
def disable_rule(scope_id: str, rule_id: str):
    return data(routing.update_rule(caller(), scope_id, rule_id, {"enabled": False}))


# ---- message schemas ----------------------------------------------------------------------------

SCHEMAS = "/scopes/<scope_id>/schemas"
SCHEMA = SCHEMAS + "/<name>/<version>"


@router.post(SCHEMAS)
def register_schema(scope_id: str, body: Annotated[RegisterSchema, Body()]):
    return data(schemas.register(caller(), scope_id, body.name, str(body.version), body.schema_), 201)


@router.get(SCHEMAS)
def list_schemas(scope_id: str):
    return data(schemas.list_schemas(caller(), scope_id))


@router.get(SCHEMA)
def get_schema(scope_id: str, name: str, version: str):
    return data(schemas.get_schema(caller(), scope_id, name, version))


@router.post(SCHEMA + "/validate")
def validate_payload(scope_id: str, name: str, version: str, body: Annotated[ValidatePayload, Body()]):
    return data(schemas.validate(caller(), scope_id, name, version, body.payload))


@router.delete(SCHEMA)
def deprecate_schema(scope_id: str, name: str, version: str):
    return data(schemas.deprecate(caller(), scope_id, name, version))


@router.put(QUEUE + "/schema")
def queue_schema(scope_id: str, queue_id: str, body: Annotated[QueueSchema, Body()]):
    version = None if body.version is None else str(body.version)
    return data(schemas.bind_queue(caller(), scope_id, queue_id, body.name, version))


# ---- HITL patterns ------------------------------------------------------------------------------

PATTERNS = "/scopes/<scope_id>/hitl-patterns"


@router.post(PATTERNS)
def register_pattern(scope_id: str, body: Annotated[RegisterPattern, Body()]):
    return data(hitl.register(caller(), scope_id, body.fields()), 201)


@router.get(PATTERNS)
def list_patterns(scope_id: str):
    return data(hitl.list_patterns(caller(), scope_id))


@router.get(PATTERNS + "/<name>/<version>")
def get_pattern(scope_id: str, name: str, version: str):
    return data(hitl.get_pattern(caller(), scope_id, name, version))


@router.post(PATTERNS + "/<name>/expand")
def expand_pattern(scope_id: str, name: str, body: Annotated[ExpandPattern, Body()]):
    return data(hitl.expand_pattern(caller(), scope_id, name, str(body.version), body.parameters or {}))
