"""Routes and request bodies of a scope's HITL patterns: register, list, read and expand.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import Field, model_validator

from functions.api.work.envelope import caller, data
from functions.api.work.fields import _Strict
from functions.api.work.schemas import NAME, Version
from postbox.work import hitl

router = Router()


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


SECTION_FIELDS = {"context": {"title", "content"}, "decision": {"field", "options", "label"},
                  "input": {"field", "kind", "required", "label"}}


class HitlSection(_Strict):
    """One section of a spec written as sections: a `context` (title, content), a `decision`
    (field, options) or an `input` (field, kind, required, label)."""

    type: Literal["context", "decision", "input"]
    title: Annotated[str, Field(max_length=1000)] | None = None
    content: Annotated[str, Field(max_length=100_000)] | None = None
    field: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    options: Annotated[list[Annotated[str, Field(max_length=256)]], Field(min_length=1, max_length=100)] | None = None
    kind: Literal["text", "number", "boolean", "json"] | None = None
    required: bool | None = None
    label: Annotated[str, Field(max_length=1000)] | None = None

    @model_validator(mode="after")
    def _fits_type(self) -> HitlSection:
        extra = self.model_fields_set - SECTION_FIELDS[self.type] - {"type"}
        if extra:
            raise ValueError(f"a {self.type} section takes no {', '.join(sorted(extra))}")
        if self.type != "context" and self.field is None:
            raise ValueError(f"a {self.type} section needs `field`")
        return self


class HitlSpec(_Strict):
    """A pattern's spec: what a reviewer sees (`context`), decides (`decision`) and fills (`input`),
    keyed by part or written as a list of `sections`; read back as written."""

    context: HitlContext | None = None
    decision: HitlDecision | None = None
    input: Annotated[list[HitlInput], Field(max_length=100)] | None = None
    sections: Annotated[list[HitlSection], Field(min_length=1, max_length=100)] | None = None
    timeout_s: Annotated[int, Field(ge=1, le=30 * 24 * 3600)] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> HitlSpec:
        keyed = self.model_fields_set & {"context", "decision", "input"}
        if self.sections is not None and keyed:
            raise ValueError(f"a spec written as sections takes no {', '.join(sorted(keyed))}")
        return self


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
