"""Folds: `reduce(fn, initial)` or `aggregate(name=count() | sum_of(f) | min_of(f) | max_of(f) | avg_of(f))`.

An accumulator is plain JSON: it is stored as a state row between batches.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Field:
    """One named aggregate: its kind and the function reading the number from a record."""

    kind: str
    of: Callable[[Any], Any] | None = None


def count() -> Field:
    return Field("count")


def sum_of(of: Callable[[Any], Any]) -> Field:
    return Field("sum", of)


def min_of(of: Callable[[Any], Any]) -> Field:
    return Field("min", of)


def max_of(of: Callable[[Any], Any]) -> Field:
    return Field("max", of)


def avg_of(of: Callable[[Any], Any]) -> Field:
    return Field("avg", of)


class Fold:
    kind = ""

    def config(self) -> dict[str, Any]:
        return {}

    def initial(self) -> Any:
        raise NotImplementedError

    def add(self, acc: Any, value: Any) -> Any:
        raise NotImplementedError

    def result(self, acc: Any) -> Any:
        return acc


class Reduce(Fold):
    kind = "reduce"

    def __init__(self, fn: Callable[[Any, Any], Any], initial: Any = None) -> None:
        self.fn = fn
        self._initial = initial

    def initial(self) -> Any:
        return copy.deepcopy(self._initial)

    def add(self, acc: Any, value: Any) -> Any:
        return self.fn(acc, value)


class Aggregate(Fold):
    kind = "aggregate"

    def __init__(self, fields: dict[str, Field]) -> None:
        if not fields:
            raise ValueError("aggregate needs at least one field")
        for name, f in fields.items():
            if not isinstance(f, Field):
                raise TypeError(f"aggregate field {name!r}: use count(), sum_of(), min_of(), max_of() or avg_of()")
        self.fields = fields

    def config(self) -> dict[str, Any]:
        return {"fields": {name: f.kind for name, f in self.fields.items()}}

    def initial(self) -> Any:
        out: dict[str, Any] = {}
        for name, f in self.fields.items():
            out[name] = 0 if f.kind in ("count", "sum") else {"sum": 0, "n": 0} if f.kind == "avg" else None
        return out

    def add(self, acc: Any, value: Any) -> Any:
        acc = dict(acc)
        for name, f in self.fields.items():
            if f.kind == "count":
                acc[name] += 1
                continue
            x = f.of(value)  # type: ignore[misc]
            if f.kind == "sum":
                acc[name] += x
            elif f.kind == "avg":
                acc[name] = {"sum": acc[name]["sum"] + x, "n": acc[name]["n"] + 1}
            elif f.kind == "min":
                acc[name] = x if acc[name] is None else min(acc[name], x)
            else:
                acc[name] = x if acc[name] is None else max(acc[name], x)
        return acc

    def result(self, acc: Any) -> Any:
        out = dict(acc)
        for name, f in self.fields.items():
            if f.kind == "avg":
                n = acc[name]["n"]
                out[name] = acc[name]["sum"] / n if n else None
        return out
