"""Request bodies of the work surface's GDPR routes: an erasure or export request for one actor.

Strict like every model of the surface: an unknown field, a wrong type or a value out of range is
a VALIDATION_ERROR naming the field.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from functions.api.work_schema import _Strict

# Actors are named as principals name them: ("api_key", key id) for a tenant key, or the subject a
# work API key was minted for ("user", "agent", "service", ...). `system` and `redacted` are ours.
ActorType = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
ActorId = Annotated[str, Field(min_length=1, max_length=256)]
RESERVED_ACTOR_TYPES = ("system", "redacted")


class _Actor(_Strict):
    actor_type: ActorType
    actor_id: ActorId

    @field_validator("actor_type")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_ACTOR_TYPES:
            raise ValueError(f"`{value}` names no actor (it is reserved)")
        return value


class Erasure(_Actor):
    """Erase an actor's data: `redact` (default) overwrites it with a marker, `delete` removes it."""

    mode: Literal["redact", "delete"] = "redact"


class Export(_Actor):
    """Export an actor's data as JSON lines (default) or one JSON document, optionally zstd-compressed."""

    format: Literal["jsonl", "json"] = "jsonl"
    compression: Literal["none", "zstd"] = "none"
