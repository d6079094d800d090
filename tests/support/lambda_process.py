"""A surface's real handler in a fresh interpreter set up as Lambda sets one up (metrics on, its
log level from Lambda's JSON log controls, tracing off), so that what it writes is exactly what
CloudWatch would ingest: run as a script, it calls the handler with each event of a JSON file and
separates each invocation's output on stdout with a marker line; `run` does it from a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

MARK = "\x1e-- invocation --\x1e"
FAULT = "POSTBOX_TEST_FAULT"
CLOUDWATCH_EVENT_OVERHEAD = 26
"""Bytes CloudWatch Logs counts per log event on top of its message (PutLogEvents' batch size)."""


def logged_bytes(output: str) -> int:
    """What CloudWatch Logs would ingest for one invocation's output: each line's UTF-8 bytes, plus
    the per-event overhead."""
    return sum(len(line.encode()) + CLOUDWATCH_EVENT_OVERHEAD for line in output.splitlines() if line)


def run(dotted: str, events: list[dict], database_url: str, tmp: Path, fault: str | None = None,
        env: dict[str, str] | None = None) -> list[tuple[Any, str]]:
    """[(answer, what that invocation wrote to stdout and stderr)] for each event, in order.
    `fault` ("module:function") makes that function raise, as a bug of ours would; `env` adds to the
    function's environment (its log sampling rate: none of the successful requests' lines unless set)."""
    extra = {"POSTBOX_LOG_SAMPLE_RATE": "0", **(env or {})}
    (tmp / "events.json").write_text(json.dumps(events))
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("POWERTOOLS_", "POSTBOX_"))}
    service = dotted.split(".")[2].replace("_", "-")
    environment.update(extra)
    environment.update(
        DATABASE_URL=database_url, AWS_LAMBDA_FUNCTION_NAME=f"postbox-test-{service}", AWS_REGION="us-east-1",
        AWS_LAMBDA_LOG_FORMAT="JSON", AWS_LAMBDA_LOG_LEVEL="INFO", POWERTOOLS_TRACE_DISABLED="true",
        POWERTOOLS_SERVICE_NAME=service, POWERTOOLS_METRICS_NAMESPACE="Postbox",
        POSTBOX_ENCRYPTION_KEY="MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", PYTHONPATH=os.pathsep.join(sys.path),
    )
    if fault:
        environment[FAULT] = fault
    done = subprocess.run([sys.executable, "-X", "utf8", "-m", "support.lambda_process", dotted, str(tmp)],
                          env=environment,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads((tmp / "answers.json").read_text())
    outputs = done.stdout.split(MARK + "\n")[1:]
    errors = done.stderr.split(MARK + "\n")[1:]
    assert len(outputs) == len(errors) == len(events), (done.stdout[-2000:], done.stderr[-2000:])
    return [(a, o + e) for a, o, e in zip(answers, outputs, errors, strict=True)]


def _main(dotted: str, folder: str) -> None:
    from functions.local.invoke import entry_point
    from functions.local.lambda_context import LocalContext

    handler = entry_point(dotted)  # the init phase: what it writes is no invocation's
    if os.environ.get(FAULT):
        import importlib

        module, name = os.environ[FAULT].split(":")

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("an injected fault")

        setattr(importlib.import_module(module), name, broken)
    answers = []
    for event in json.loads((Path(folder) / "events.json").read_text()):
        for stream in (sys.stdout, sys.stderr):
            stream.write(MARK + "\n")
            stream.flush()
        try:
            answers.append(handler(event, LocalContext(dotted)))
        except Exception as error:  # Lambda's own error answer
            answers.append({"raised": type(error).__name__})
        sys.stdout.flush()
        sys.stderr.flush()
    (Path(folder) / "answers.json").write_text(json.dumps(answers, default=str))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
