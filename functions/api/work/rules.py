"""Routes and request bodies of a scope's routing rules and their condition language (the JSON
form, or expressions the domain parses): create, list, read, update, delete, enable, disable,
and the dry run.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import AfterValidator, ConfigDict, Discriminator, Field, Tag, model_validator

from functions.api.work.envelope import caller, data
from functions.api.work.fields import Priority, Text, Tier, _Strict
from postbox.work import routing
from postbox.work.expressions import FIELD, FIELDS_READ, MAX_CONDITION_DEPTH, MAX_EXPRESSION_LENGTH

router = Router()


RuleTrigger = Literal["message_published", "message_completed", "message_failed", "message_dead_lettered"]
Op = Literal["eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "contains", "exists", "not_exists"]
_NEEDS_LIST = {"in", "not_in"}
_NO_VALUE = {"exists", "not_exists"}


def _known_field(path: str) -> str:
    """A comparison's field must be one a condition reads; the refusal names it."""
    if not re.match(FIELD, path):
        raise ValueError(f"{path!r} is not a field a condition reads ({FIELDS_READ})")
    return path


class Condition(_Strict):
    """One of: {"all": [...]}, {"any": [...]}, {"not": {...}}, or {"field", "op", "value"?}."""

    all: Annotated[list[Condition], Field(min_length=1, max_length=50)] | None = None
    any: Annotated[list[Condition], Field(min_length=1, max_length=50)] | None = None
    not_: Condition | None = Field(default=None, alias="not")
    field: Annotated[str, Field(max_length=256, json_schema_extra={"pattern": FIELD}),
                     AfterValidator(_known_field)] | None = None
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
        elif self.op == "contains" and (self.value is None or isinstance(self.value, list | dict)):
            raise ValueError("`contains` takes a string, number or boolean")
        return self

    def _depth(self) -> int:
        kids = (self.all or []) + (self.any or []) + ([self.not_] if self.not_ else [])
        return 1 + max((k._depth() for k in kids), default=0)

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


def _condition_form(value: Any) -> str:
    if isinstance(value, str):
        return "condition-expression"
    return "condition-list" if isinstance(value, list) else "condition-object"


ConditionText = Annotated[str, Field(min_length=1, max_length=MAX_EXPRESSION_LENGTH)]
_ConditionItem = Annotated[Annotated[Condition, Tag("condition-object")]
                           | Annotated[ConditionText, Tag("condition-expression")], Discriminator(_condition_form)]
# A rule's conditions as a request writes them: the JSON form, an expression in the product's
# notation (`labels.customer_tier == 'premium'`), or a list of either, meaning all of them. The
# domain translates expressions into the JSON form; the error paths leave the tags out.
Conditions = Annotated[
    Annotated[Condition, Tag("condition-object")]
    | Annotated[ConditionText, Tag("condition-expression")]
    | Annotated[list[_ConditionItem], Tag("condition-list"), Field(min_length=1, max_length=50)],
    Discriminator(_condition_form)]


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
    conditions: Conditions | None = None
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
    conditions: Conditions | None = None
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
