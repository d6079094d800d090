"""Routes and request bodies of a scope's message schemas: register, list, read, validate a
payload, deprecate, and bind a schema to a queue.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import ConfigDict, Field, model_validator

from functions.api.work.envelope import caller, data
from functions.api.work.fields import _Strict
from functions.api.work.queues import QUEUE
from postbox.work import schemas

router = Router()


NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
VERSION = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"
Version = Annotated[str, Field(pattern=VERSION)] | Annotated[int, Field(ge=0, le=1_000_000_000)]


class RegisterSchema(_Strict):
    name: Annotated[str, Field(pattern=NAME)]
    version: Version
    schema_: dict[str, Any] | bool = Field(alias="schema")

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)


class ValidatePayload(_Strict):
    payload: Any


class QueueSchema(_Strict):
    """The schema a queue's bodies must satisfy; `name` null: none."""

    name: Annotated[str, Field(pattern=NAME)] | None
    version: Version | None = None

    @model_validator(mode="after")
    def _both(self) -> QueueSchema:
        if self.name is not None and self.version is None:
            raise ValueError("a schema is named by `name` and `version`")
        return self


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
