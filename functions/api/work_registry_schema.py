"""Request bodies of the work surface's registries and subscriptions: routing rules and their
condition language, message schemas, HITL patterns, subscriptions.

Strict like every model of the surface: a rule, filter or pattern that does not parse is a
VALIDATION_ERROR whose `details` name the part that is wrong.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from functions.api.work_schema import Priority, Text, Tier, _Strict

# ---- routing rules ------------------------------------------------------------------------------

RuleTrigger = Literal["message_published", "message_completed", "message_failed", "message_dead_lettered"]
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
    """route/copy (`queue_id` in the rule's scope, or in `target_scope_id` when a trust allows it),
    transform (labels, type, priority), escalate (to `tier`, default one tier up), archive."""

    type: Literal["route", "copy", "transform", "escalate", "archive"]
    queue_id: Annotated[str, Field(max_length=64)] | None = None
    target_scope_id: Annotated[str, Field(max_length=64)] | None = None
    set_labels: dict[str, Annotated[str, Field(max_length=256)]] | None = None
    remove_labels: list[Annotated[str, Field(max_length=256)]] | None = None
    message_type: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] | None = None
    priority: Priority | None = None
    tier: Tier | None = None

    @model_validator(mode="after")
    def _fits_type(self) -> Action:
        allowed = {"route": {"queue_id", "target_scope_id"}, "copy": {"queue_id", "target_scope_id"},
                   "archive": set(), "escalate": {"tier"},
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
            try:
                if self.target_scope_id is not None:
                    uuid.UUID(self.target_scope_id)
            except ValueError:
                raise ValueError("`target_scope_id` is not a scope id") from None
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


# ---- subscriptions ------------------------------------------------------------------------------

UUID_TEXT = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
InFlight = Annotated[int, Field(ge=1, le=10_000)]
PushUrl = Annotated[str, Field(max_length=2048, pattern=r"^https?://[^\s/?#]+[^\s]*$")]


class CreateSubscription(_Strict):
    subscriber_type: Literal["user", "agent", "service"]
    subscriber_id: Annotated[str, Field(min_length=1, max_length=256)]
    queue_id: Annotated[str, Field(pattern=UUID_TEXT)]
    filter: Condition | None = None
    delivery_mode: Literal["pull", "push"] = "pull"
    push_url: PushUrl | None = None
    auto_claim: bool = False
    max_in_flight: InFlight = 100

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class UpdateSubscription(_Strict):
    filter: Condition | None = None
    delivery_mode: Literal["pull", "push"] | None = None
    push_url: PushUrl | None = None
    auto_claim: bool | None = None
    max_in_flight: InFlight | None = None

    def fields(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude_unset=True, by_alias=True)
        return {k: v for k, v in out.items() if v is not None or k == "filter"}


class CheckProcessed(_Strict):
    message_ids: Annotated[list[Annotated[str, Field(max_length=64)]], Field(min_length=1, max_length=1000)]
