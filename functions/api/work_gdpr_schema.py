"""Request bodies of the work surface's GDPR routes: an erasure or export request for one actor.

Strict like every model of the surface: an unknown field, a wrong type or a value out of range is
a VALIDATION_ERROR naming the field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from functions.api.work_schema import ActorId, ActorType, _Strict, not_reserved


class _Actor(_Strict):
    actor_type: ActorType
    actor_id: ActorId

    @field_validator("actor_type")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        return not_reserved(value)


class Erasure(_Actor):
    """Erase an actor's data: `redact` (default) overwrites it with a marker, `delete` removes it."""

    mode: Literal["redact", "delete"] = "redact"


class Export(_Actor):
    """Export an actor's data as JSON lines (default) or one JSON document, optionally zstd-compressed."""

    format: Literal["jsonl", "json"] = "jsonl"
    compression: Literal["none", "zstd"] = "none"
