"""Import Lambda entry points by their dotted name and call them in process."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache
from typing import Any

from functions.local.lambda_context import LocalContext


@cache
def entry_point(dotted: str) -> Callable[[dict, Any], Any]:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def invoke(dotted: str, event: dict, function_name: str, timeout_s: float = 30.0) -> Any:
    return entry_point(dotted)(event, LocalContext(function_name, timeout_s))
