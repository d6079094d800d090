"""How the command line shows results: JSON for scripts (`--json`), tables for people, progress bars
on long runs (drawn on stderr, only when it is a terminal... or always with POSTBOX_PROGRESS=1)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

out = Console(soft_wrap=True)
err = Console(stderr=True)


def plain(value: Any) -> Any:
    """Dataclasses (the client's results) as their raw JSON answer, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        raw = getattr(value, "raw", None)
        return raw if raw else {k: plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(plain(value), default=str) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str)
        return text if len(text) <= 80 else text[:77] + "..."
    return str(value)


def when(epoch: float | None) -> str:
    return "" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


def table(rows: Iterable[dict[str, Any]], columns: Sequence[str], title: str | None = None) -> None:
    t = Table(title=title, header_style="bold")
    for c in columns:
        t.add_column(c)
    count = 0
    for row in rows:
        t.add_row(*(cell(row.get(c)) for c in columns))
        count += 1
    if count:
        out.print(t)
    else:
        out.print(f"[dim]no {title or 'rows'}[/dim]")


def show(value: Any, as_json: bool) -> None:
    """A result without its own table: JSON either way, pretty for people."""
    if as_json:
        emit_json(value)
    else:
        out.print_json(json.dumps(plain(value), default=str))


@contextmanager
def progress(description: str, total: int | None):
    """A progress bar with an `advance(n)` callable; silent when stderr is not a terminal."""
    enabled = err.is_terminal or os.environ.get("POSTBOX_PROGRESS") == "1"
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err, disable=not enabled, transient=False)
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def json_lines(path: str, command: str) -> list[tuple[int, Any]]:
    """(line number, JSON value) of each non-blank line of a file (`-`: stdin), for the bulk publishes;
    a line that is not JSON ends the command, naming the line."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    found = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                found.append((n, json.loads(line)))
            except ValueError as error:
                raise SystemExit(f"postbox {command}: line {n} is not JSON: {error}") from None
    return found


def bulk_report(answered: Sequence[tuple[int, bool, bool, dict | None]]) -> int:
    """Print a bulk publish's count (published, replayed, refused) and each refused line's reason on
    stderr, from (line, ok, replayed, error) per line; the exit status: 1 if any line was refused."""
    refused = [(n, error or {}) for n, ok, _, error in answered if not ok]
    published = sum(1 for _, ok, replayed, _ in answered if ok and not replayed)
    replayed = sum(1 for _, ok, replayed, _ in answered if ok and replayed)
    print(f"published {published}, replayed {replayed}, refused {len(refused)}")
    for n, error in refused:
        print(f"line {n}: {error.get('code')}: {error.get('message')}", file=sys.stderr)
    return 1 if refused else 0
