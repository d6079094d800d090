"""Field types every surface's request models share, so a body is held to one set of rules.

A request model refuses what it does not know (`extra="forbid"`, the error names the field) and
never coerces a type (`strict`); an integer that reaches a column is bounded by that column, so
2^63 is a 4xx naming the field rather than PostgreSQL's overflow.

Request-model modules evaluate their annotations as they run (no `from __future__ import
annotations`): postponed, each field's annotation would be parsed and compiled from its text when
pydantic makes the class, about 40 % of such a module's import. A model's validator is built on
its route's first request (`defer_build`).
"""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from postbox.inputs import INT32_MAX, INT64_MAX
from postbox.names import NameRule


class StrictBody(BaseModel):
    """A request body: unknown fields refused by name, no type coerced."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True, defer_build=True)

    def __repr__(self) -> str:
        """Short on purpose: Powertools formats the route's arguments into a debug f-string on every
        request (whatever the log level), and a full repr of a 100-message body costs more than the
        rest of the handler's own Python."""
        return f"{type(self).__name__}(...)"


Int32 = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
NonNegative32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
BigInt = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Id = Annotated[int, Field(ge=0, le=INT64_MAX)]
"""A row id or an offset: a bigint column, never negative."""


def name_of(rule: NameRule) -> object:
    """A name field held to the resource's one rule (the domain checks it again on every creating path)."""
    return Annotated[str, Field(min_length=1, max_length=rule.max_length, pattern=rule.pattern)]
