"""Request bodies of the work surface (`/v1/modules/scaiqueue`), with the spec's fields and bounds.

Strict models that refuse unknown fields: a wrong type, an out-of-range value or a field we do not
know is a VALIDATION_ERROR naming it, never silently coerced or dropped.
"""

from __future__ import annotations

import uuid
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
    visible_at: datetime | None = Field(default=None, strict=False)

    @model_validator(mode="after")
    def _one_spec(self) -> Publish:
        if self.hitl_spec is not None and self.hitl_pattern is not None:
            raise ValueError("give hitl_spec or hitl_pattern, not both")
        return self


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


# ---- routing rules ------------------------------------------------------------------------------

RuleTrigger = Literal["message_published"]
Op = Literal["eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "exists", "not_exists"]
FIELD = r"^(type|content_type|correlation_id|queue|priority\.(tier|score)|labels\.[^.]+|body(\.[^.]+)*)$"
_NEEDS_LIST = {"in", "not_in"}
_NO_VALUE = {"exists", "not_exists"}
MAX_CONDITION_DEPTH = 8


class Condition(_Strict):
    """One of: {"all": [...]}, {"any": [...]}, {"not": {...}}, or {"field", "op", "value"?}."""

    all: Annotated[list[Condition], Field(min_length=1, max_length=50)] | None = None
    any: Annotated[list[Condition], Field(min_length=1, max_length=50)] | None = None
    not_: Condition | None = Field(default=None, alias="not")
    field: Annotated[str, Field(max_length=256, pattern=FIELD)] | None = None
    op: Op | None = None
    value: Any = None

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _one_form(self) -> Condition:
        given = self.model_fields_set
        forms = [k for k in ("all", "any", "not_") if k in given]
        if forms and given - set(forms):
            raise ValueError("a condition is one of all, any, not, or field/op/value")
        if len(forms) > 1:
            raise ValueError("a condition is one of all, any, not, or field/op/value")
        if forms:
            if self._depth() > MAX_CONDITION_DEPTH:
                raise ValueError(f"conditions nest at most {MAX_CONDITION_DEPTH} levels")
            return self
        if self.field is None or self.op is None:
            raise ValueError("a comparison needs `field` and `op`")
        if self.op in _NO_VALUE:
            if "value" in given:
                raise ValueError(f"`{self.op}` takes no value")
        elif "value" not in given:
            raise ValueError(f"`{self.op}` needs a value")
        elif self.op in _NEEDS_LIST and not isinstance(self.value, list):
            raise ValueError(f"`{self.op}` needs a list value")
        elif self.op in ("gt", "gte", "lt", "lte") and (
                isinstance(self.value, bool) or not isinstance(self.value, int | float | str)):
            raise ValueError(f"`{self.op}` compares with a number or a string")
        return self

    def _depth(self) -> int:
        kids = (self.all or []) + (self.any or []) + ([self.not_] if self.not_ else [])
        return 1 + max((k._depth() for k in kids), default=0)

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class Action(_Strict):
    """route/copy (`queue_id` in the rule's scope), transform (labels, type, priority), escalate
    (to `tier`, default one tier up), archive."""

    type: Literal["route", "copy", "transform", "escalate", "archive"]
    queue_id: Annotated[str, Field(max_length=64)] | None = None
    set_labels: dict[str, Annotated[str, Field(max_length=256)]] | None = None
    remove_labels: list[Annotated[str, Field(max_length=256)]] | None = None
    message_type: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] | None = None
    priority: Priority | None = None
    tier: Tier | None = None

    @model_validator(mode="after")
    def _fits_type(self) -> Action:
        allowed = {"route": {"queue_id"}, "copy": {"queue_id"}, "archive": set(), "escalate": {"tier"},
                   "transform": {"set_labels", "remove_labels", "message_type", "priority"}}[self.type]
        extra = self.model_fields_set - allowed - {"type"}
        if extra:
            raise ValueError(f"a {self.type} action takes no {', '.join(sorted(extra))}")
        if self.type in ("route", "copy"):
            if self.queue_id is None:
                raise ValueError(f"a {self.type} action needs `queue_id`")
            try:
                uuid.UUID(self.queue_id)
            except ValueError:
                raise ValueError("`queue_id` is not a queue id") from None
        if self.type == "transform" and not self.model_fields_set & allowed:
            raise ValueError("a transform action changes at least one of " + ", ".join(sorted(allowed)))
        return self


class RuleSource(_Strict):
    queue_id: Annotated[str, Field(max_length=64)]


RuleName = Annotated[str, Field(min_length=1, max_length=128)]
RulePriority = Annotated[int, Field(ge=0, le=1_000_000)]


class CreateRule(_Strict):
    name: RuleName
    description: Annotated[str, Field(max_length=2000)] | None = None
    priority: RulePriority = 100
    enabled: bool = True
    trigger: RuleTrigger = "message_published"
    conditions: Condition | None = None
    action: Action
    source: RuleSource | None = None

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class UpdateRule(_Strict):
    name: RuleName | None = None
    description: Annotated[str, Field(max_length=2000)] | None = None
    priority: RulePriority | None = None
    enabled: bool | None = None
    trigger: RuleTrigger | None = None
    conditions: Condition | None = None
    action: Action | None = None

    def fields(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude_unset=True, by_alias=True)
        return {k: v for k, v in out.items() if v is not None or k in ("description", "conditions")}


class DryRunMessage(_Strict):
    """A hypothetical message for a dry run: what rules see of a publish, and its queue."""

    type: Annotated[str, Field(min_length=1, max_length=128)] = "task"
    labels: dict[str, Annotated[str, Field(max_length=256)]] | None = None
    body: Any = None
    priority: Priority | None = None
    content_type: Text | None = None
    correlation_id: Text | None = None
    queue_id: Annotated[str, Field(max_length=64)] | None = None


class DryRun(_Strict):
    trigger: RuleTrigger = "message_published"
    message: DryRunMessage


# ---- message schemas ----------------------------------------------------------------------------

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


# ---- HITL patterns ------------------------------------------------------------------------------


class HitlContext(_Strict):
    title: Annotated[str, Field(max_length=1000)] | None = None
    content: Annotated[str, Field(max_length=100_000)] | None = None


class HitlDecision(_Strict):
    field: Annotated[str, Field(min_length=1, max_length=128)]
    options: Annotated[list[Annotated[str, Field(max_length=256)]], Field(min_length=1, max_length=100)] | None = None


class HitlInput(_Strict):
    field: Annotated[str, Field(min_length=1, max_length=128)]
    kind: Literal["text", "number", "boolean", "json"] = "text"
    required: bool = False
    label: Annotated[str, Field(max_length=1000)] | None = None


class HitlSpec(_Strict):
    """A pattern's spec: what a reviewer sees (`context`), decides (`decision`) and fills (`input`)."""

    context: HitlContext | None = None
    decision: HitlDecision | None = None
    input: Annotated[list[HitlInput], Field(max_length=100)] | None = None
    timeout_s: Annotated[int, Field(ge=1, le=30 * 24 * 3600)] | None = None


class HitlParameter(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
    description: Annotated[str, Field(max_length=1000)] | None = None
    required: bool = True
    default: Annotated[str, Field(max_length=10_000)] | None = None


class RegisterPattern(_Strict):
    name: Annotated[str, Field(pattern=NAME)]
    version: Version
    spec: HitlSpec
    parameters: Annotated[list[HitlParameter], Field(max_length=100)] | None = None

    @model_validator(mode="after")
    def _unique_parameters(self) -> RegisterPattern:
        names = [p.name for p in self.parameters or []]
        if len(names) != len(set(names)):
            raise ValueError("parameter names must be unique")
        return self

    def fields(self) -> dict[str, Any]:
        out = super().fields()
        out["version"] = str(out["version"])
        return out


class ExpandPattern(_Strict):
    version: Version
    parameters: dict[str, str | int | float | bool | None] | None = None
