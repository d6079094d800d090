"""Fixtures of the queues surface's tests, defined once."""

from __future__ import annotations

import pytest

from support import consumer_functions as fn


@pytest.fixture
def local_function(monkeypatch):
    """`record-fn` served in process by the recording consumer function, its record fresh."""
    monkeypatch.setenv("POSTBOX_CONSUMERS", "record-fn=support.consumer_functions.record")
    fn.reset()
    yield
    fn.reset()
