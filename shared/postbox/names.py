"""One name rule per kind of resource, applied on every path that creates one.

A name a create route refuses must not come into being any other way (a keyed stream created by
its first publish, a partitioned queue by its first push, a flow's sink named at registration).
Each rule is also what the request schemas and the OpenAPI document say (`pattern`, `max_length`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import Invalid


class NameRule(NamedTuple):
    kind: str
    pattern: str
    max_length: int
    says: str

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern)

    def ok(self, name: object) -> bool:
        return isinstance(name, str) and 0 < len(name) <= self.max_length and bool(self.regex.fullmatch(name))

    def check(self, name: object, field: str = "name", *, code: str | None = None) -> str:
        """The name, or Invalid naming the field and the rule."""
        if not self.ok(name):
            raise Invalid(f"{field}: a {self.kind} name is {self.says}.", code=code or f"invalid_{field}")
        return name  # type: ignore[return-value]


_cache: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _cache.get(pattern)
    if found is None:
        found = _cache[pattern] = re.compile(pattern)
    return found


QUEUE = NameRule(
    "queue", r"^[a-z][a-z0-9_-]{0,47}$", 48,
    "1-48 characters: lowercase letters, digits, _ or -, starting with a letter",
)
KEYED_STREAM = NameRule(
    "stream", r"^[A-Za-z0-9._-]{1,128}$", 128,
    "1-128 characters: letters, digits, '.', '_' or '-'",
)
SUBSCRIPTION = NameRule(
    "subscription", r"^[A-Za-z0-9._-]{1,128}$", 128,
    "1-128 characters: letters, digits, '.', '_' or '-'",
)
PARTITIONED_QUEUE = NameRule(
    "queue", r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$", 128,
    "1-128 characters: letters, digits or . _ : @ -, starting with a letter or digit",
)
PARTITION = NameRule(
    "partition", r"^[^/\x00-\x1f\x7f]{1,256}$", 256,
    "1-256 printable characters without '/'",
)
FLOW_QUERY = NameRule(
    "query", r"^[^\x00-\x1f\x7f]{1,256}$", 256,
    "1-256 printable characters",
)
PROJECT = NameRule(
    "project", r"^[^\x00-\x1f\x7f]{1,64}$", 64,
    "1-64 printable characters",
)

ALL = (QUEUE, KEYED_STREAM, SUBSCRIPTION, PARTITIONED_QUEUE, PARTITION, FLOW_QUERY, PROJECT)
