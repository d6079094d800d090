"""Field types and the strict base model every request body of the work surface shares, with
the spec's bounds: a wrong type, an out-of-range value or a field we do not know is a
VALIDATION_ERROR naming it, never silently coerced or dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"


MAX_VISIBILITY_S = 43_200


MAX_TTL_S = 30 * 24 * 3600


Ordering = Literal["fifo", "priority", "deadline"]


ConsumerMode = Literal["competing", "broadcast"]


Overflow = Literal["reject", "drop_oldest"]


Tier = Literal["critical", "high", "normal", "low", "background"]


Text = Annotated[str, Field(max_length=256)]


UUID_TEXT = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    def fields(self) -> dict[str, Any]:
        """The fields the caller sent, as plain data."""
        return self.model_dump(mode="json", exclude_unset=True)


class QueueDefaults(_Strict):
    consumer_mode: ConsumerMode | None = None
    ordering: Ordering | None = None
    max_depth: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    overflow_policy: Overflow | None = None
    visibility_timeout_s: Annotated[int, Field(ge=1, le=MAX_VISIBILITY_S)] | None = None
    max_retries: Annotated[int, Field(ge=1, le=100)] | None = None
    ttl_seconds: Annotated[int, Field(ge=1, le=MAX_TTL_S)] | None = None


class Priority(_Strict):
    tier: Tier = "normal"
    score: Annotated[int, Field(ge=0, le=1000)] = 500


# Actors are named as principals name them: ("api_key", key id) for a tenant key, or the subject a
# work API key was minted for ("user", "agent", "service", ...). `system` and `redacted` are
# Postbox's own (its agents; what an erasure left), so no request may name them as an actor.
ActorType = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9_]*$")]


ActorId = Annotated[str, Field(min_length=1, max_length=256)]


RESERVED_ACTOR_TYPES = ("system", "redacted")


def not_reserved(value: str, reserved: tuple[str, ...] = RESERVED_ACTOR_TYPES) -> str:
    if value in reserved:
        raise ValueError(f"`{value}` names no actor here (it is reserved)")
    return value
