"""What a function's cold import leaves for first use: each function is imported in a fresh
interpreter, as Lambda's init phase does, and what no request of its needs up front must not be
loaded by then (timings are bench/gateway.py's job, never a test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from functions.routes import FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(module: str, *then: str) -> set[str]:
    """The modules a fresh interpreter holds after importing `module` (and running `then`)."""
    code = "\n".join([f"import sys, {module}", *then, "import json; print(json.dumps(sorted(sys.modules)))"])
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def _packages(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_no_function_imports_jsonschema_before_a_schema_is_used(function):
    module = FUNCTIONS[function].rpartition(".")[0]
    assert _packages(_loaded_after(module)) & {"jsonschema", "referencing", "jsonschema_specifications"} == set()


def test_the_work_schemas_import_jsonschema_when_a_schema_is_first_checked():
    loaded = _loaded_after("postbox.work.schemas",
                           "from postbox.work import schemas",
                           "assert schemas.errors_of(schemas._validator('s', {'type': 'integer'}), 'x')")
    assert "jsonschema" in loaded
