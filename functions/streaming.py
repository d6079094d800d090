"""Answers written as they are produced: an open SSE read sends each append as it lands, for as long
as the door in front of the function can carry such an answer.

A handler may answer with a `StreamedBody` (an iterator of byte chunks) as its body only while
`available()`: its invoker writes the chunks out as they come. Two invokers do: the local gateway
(`postbox dev`, every request) and the streaming runtime on AWS (`functions.lambda_runtime`, behind
a Function URL in RESPONSE_STREAM mode or a REST API route in STREAM mode). Behind API Gateway's
HTTP API, which buffers the whole answer, nothing marks the invocation and the handler answers as
before, with a complete body.

The invoker also says until when the answer may last (`deadline()`, a `time.monotonic()` instant):
Lambda ends an invocation at its timeout (15 minutes at most), so a stream ends a little before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

LAMBDA_MAX_SECONDS = 900  # the longest a Lambda invocation, and so a streamed answer, can last
_invocation = threading.local()  # .deadline of the invocation this thread serves, when it may stream


class StreamedBody:
    """An answer's body, written chunk by chunk as `chunks` yields them. `close()` stops it early (the
    client went away): the generator's own cleanup runs then."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


@contextmanager
def invocation(deadline: float) -> Iterator[None]:
    """Mark this thread's invocation as one whose answer may stream, until `deadline` (monotonic)."""
    outer = getattr(_invocation, "deadline", None)
    _invocation.deadline = deadline
    try:
        yield
    finally:
        _invocation.deadline = outer


def available() -> bool:
    """Whether this thread's invocation may answer with a StreamedBody."""
    return getattr(_invocation, "deadline", None) is not None


def deadline() -> float:
    """When this thread's streamed answer must have ended (monotonic); now outside a streaming invocation."""
    found = getattr(_invocation, "deadline", None)
    return time.monotonic() if found is None else found


def body_of(result: Any) -> StreamedBody | None:
    """The StreamedBody of a handler's answer (an API Gateway-shaped dict), if it streams."""
    body = result.get("body") if isinstance(result, dict) else None
    return body if isinstance(body, StreamedBody) else None
