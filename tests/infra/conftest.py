"""Fixtures for the Pulumi-mock tests: the program run once per stack, shared by the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for `stack_harness`, whatever the import mode

from stack_harness import StackRun, run_stack  # noqa: E402


@pytest.fixture(scope="session")
def prod() -> StackRun:
    return run_stack("prod")


@pytest.fixture(scope="session")
def dev() -> StackRun:
    return run_stack("dev")
