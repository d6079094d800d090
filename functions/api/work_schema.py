"""Request bodies of the work surface (`/v1/modules/scaiqueue`), with the spec's fields and bounds.

Strict models that refuse unknown fields: a wrong type, an out-of-range value or a field we do not
know is a VALIDATION_ERROR naming it, never silently coerced or dropped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
MAX_VISIBILITY_S = 43_200
MAX_TTL_S = 30 * 24 * 3600
Ordering = Literal["fifo", "priority", "deadline"]
ConsumerMode = Literal["competing", "broadcast"]
Overflow = Literal["reject", "drop_oldest"]
Tier = Literal["critical", "high", "normal", "low", "background"]
Text = Annotated[str, Field(max_length=256)]


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


class CreateScope(_Strict):
    slug: Annotated[str, Field(pattern=SLUG)]
    display_name: Text | None = None
    description: Annotated[str, Field(max_length=2000)] | None = None
    defaults: QueueDefaults | None = None
    # Extensions: which optional events the scope's `_events` queue receives, retention of ended
    # messages, and the dead-letter depth at which the monitor raises an alert event.
    emit_events: list[Literal["published", "claimed"]] | None = None
    retention_days: Annotated[int, Field(ge=1, le=365)] | None = None
    dead_letter_alert_threshold: Annotated[int, Field(ge=1, le=10_000_000)] | None = None


class CreateQueue(QueueDefaults):
    slug: Annotated[str, Field(pattern=SLUG)]
    display_name: Text | None = None
    description: Annotated[str, Field(max_length=2000)] | None = None


class Priority(_Strict):
    tier: Tier = "normal"
    score: Annotated[int, Field(ge=0, le=1000)] = 500


class PatternRef(_Strict):
    """A HITL pattern a message's spec is expanded from."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    version: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")] | Annotated[int, Field(ge=0)]
    parameters: dict[str, str | int | float | bool | None] | None = None


class StreamChunk(_Strict):
    """Marks a published message as chunk `seq` of the stream `id` (`final`: the last one)."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
    seq: Annotated[int, Field(ge=0, le=10_000_000)]
    final: bool = False


class Publish(_Strict):
    body: str | dict[str, Any]
    type: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] = "task"
    priority: Priority | None = None
    labels: dict[str, Annotated[str, Field(max_length=256)]] | None = None
    content_type: Text = "application/json"
    correlation_id: Text | None = None
    causation_id: Text | None = None
    parent_id: Text | None = None
    ttl_seconds: Annotated[int, Field(ge=1, le=MAX_TTL_S)] | None = None
    deadline: datetime | None = Field(default=None, strict=False)
    max_retries: Annotated[int, Field(ge=1, le=100)] | None = None
    visibility_timeout_s: Annotated[int, Field(ge=1, le=MAX_VISIBILITY_S)] | None = None
    idempotency_key: Text | None = None
    hitl_spec: dict[str, Any] | None = None
    hitl_pattern: PatternRef | None = None
    stream: StreamChunk | None = None
    visible_at: datetime | None = Field(default=None, strict=False)

    @model_validator(mode="after")
    def _one_spec(self) -> Publish:
        if self.hitl_spec is not None and self.hitl_pattern is not None:
            raise ValueError("give hitl_spec or hitl_pattern, not both")
        return self


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


class Claim(_Strict):
    batch_size: Annotated[int, Field(ge=1, le=100)] = 1
    visibility_timeout_s: Annotated[int, Field(ge=1, le=MAX_VISIBILITY_S)] | None = None


Token = Annotated[str, Field(max_length=64)]


class Complete(_Strict):
    response: dict[str, Any] | None = None
    claim_token: Token | None = None


class Fail(_Strict):
    reason: Annotated[str, Field(max_length=2000)] = ""
    claim_token: Token | None = None


class Release(_Strict):
    claim_token: Token | None = None


class Extend(_Strict):
    seconds: Annotated[int, Field(ge=1, le=MAX_VISIBILITY_S)]
    claim_token: Token | None = None


class BatchItem(_Strict):
    id: Annotated[str, Field(max_length=64)]
    claim_token: Token | None = None
    response: dict[str, Any] | None = None
    reason: Annotated[str, Field(max_length=2000)] | None = None


class Batch(_Strict):
    """The batch extension: complete, fail or release up to 100 claimed messages in one call."""

    items: Annotated[list[BatchItem], Field(min_length=1, max_length=100)]
