"""Cold imports: every function's module and the key resolver, each against a minimal Powertools
handler (resolver with validation + pydantic + psycopg + zstandard, `reference/minimal_handler.py`)
imported in the same run; each figure the median CPU time of fresh interpreters taking turns.

  a. import of each function's module (`functions.routes.FUNCTIONS`): what Lambda's init phase runs
     for it. Goal <= 1.0 each.
  b. import of `functions.keys`, which resolves keys inside each surface function: alone (goal
     <= 0.5), and what it adds to an interpreter that already holds the minimal handler's imports.
  c. what the init phase leaves to a first request: the work function's first request to each of its
     lazily included route modules (no key, so no database: answered 401 once the module's router is
     in); the same request warm takes well under a millisecond.

No database is needed: `.venv/bin/python bench/cold_imports.py [--quick]`. CPU time on a loaded
machine moves by ±20 % between runs; `--instructions` counts instead the instructions each import
executes (valgrind's callgrind, one run each, a few minutes; a and b only), which no load moves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402
from functions.routes import FUNCTIONS  # noqa: E402

REFERENCE = "bench.reference.minimal_handler"
KEYS = "functions.keys"

# CPU and wall time of the statement `timed`, after `before` (untimed), in a fresh interpreter.
_TIMED = ("{before}\nimport time\ncpu = time.process_time(); wall = time.perf_counter()\n{timed}\n"
          "print(time.process_time() - cpu, time.perf_counter() - wall)")


def _env() -> dict[str, str]:
    """Fresh interpreters that read every module from bytecode, as Lambda reads the layers and the
    functions zip (both ship .pyc files): a cache folder of their own, filled by a first run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="postbox-bench-pyc-")
    env.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    return env


def _run(timed: str, before: str, env: dict[str, str]) -> tuple[float, float]:
    """(CPU ms, wall ms) of `timed` in a fresh interpreter."""
    code = _TIMED.format(before=before, timed=timed)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=env).stdout.split()
    return float(out[-2]) * 1000, float(out[-1]) * 1000


def medians(cases: dict[str, tuple[str, str]], runs: int) -> dict[str, tuple[float, float]]:
    """Median (CPU, wall) of each case, (timed, before), its runs taking turns with the others' so
    the machine's load falls on all of them alike. CPU time is the figure: the wall time of a cold
    import on a loaded machine is mostly waiting for a core."""
    env = _env()
    for timed, before in cases.values():
        _run(timed, before, env)  # writes the bytecode
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, (timed, before) in cases.items():
            samples[name].append(_run(timed, before, env))
    return {name: (statistics.median(c for c, _ in s), statistics.median(w for _, w in s))
            for name, s in samples.items()}


def _instructions(code: str, env: dict[str, str]) -> int:
    """Instructions a fresh interpreter executes to run `code` (callgrind's count, user space)."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
                          code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**env, "PYTHONHASHSEED": "0"}).stderr
    return int(out.rpartition("Collected : ")[2].split()[0])


def instructions(cases: dict[str, tuple[str, str]]) -> dict[str, int]:
    """Instructions of each case's `timed` statement: its run less the run of `before` alone."""
    env = _env()
    for timed, before in cases.values():
        _run(timed, before, env)  # writes the bytecode
    found, baselines = {}, {}
    for name, (timed, before) in cases.items():
        if before not in baselines:
            baselines[before] = _instructions(before or "pass", env)
        found[name] = _instructions(f"{before}\n{timed}", env) - baselines[before]
    return found


def _first_request(path: str) -> str:
    """The work function's handler called with a keyless GET of `path` (an event as API Gateway's)."""
    return (f"answer = work.handler(http_event('GET', {path!r}), LocalContext('work'))\n"
            "assert answer['statusCode'] == 401, answer")


_WORK_READY = ("from functions.api.work import app as work\nfrom functions.local.events import http_event\n"
               "from functions.local.lambda_context import LocalContext")


def _sample(module: str) -> str:
    """A path one of `module`'s rules claims."""
    import re

    from functions.api.work import app as work

    router = __import__(f"functions.api.work.{module}", fromlist=["router"]).router
    rule = next(iter(router._routes))[0]
    path = work.MOUNT + re.sub(r"<(\w+)>", r"p-\1", rule)
    assert work.app.lazy_routers.module_for(path) == module, (module, path)
    return path


def _import_cases(functions: dict[str, str]) -> dict[str, tuple[str, str]]:
    cases = {REFERENCE: (f"import {REFERENCE}", "")}
    cases |= {name: (f"import {module}", "") for name, module in functions.items()}
    cases[KEYS] = (f"import {KEYS}", "")
    cases["keys after the reference"] = (f"import {KEYS}", f"import {REFERENCE}")
    return cases


def run_instructions(table: common.Table) -> None:
    functions = {name: dotted.rpartition(".")[0] for name, dotted in sorted(FUNCTIONS.items())}
    cases = _import_cases(functions)
    common.progress(f"instructions: {len(cases)} imports under callgrind, one run each")
    counts = instructions(cases)
    ref = counts[REFERENCE]
    labels = {name: f"a. import {module}" for name, module in functions.items()}
    labels |= {KEYS: f"b. import {KEYS}", "keys after the reference": f"b. ... after {REFERENCE.rpartition('.')[2]}"}
    for name, label in labels.items():
        goal = "0.50" if name == KEYS else "" if name.startswith("keys") else "1.00"
        table.row(label, 1, f"{counts[name] / 1e6:.0f} M", f"{ref / 1e6:.0f} M", counts[name] / ref,
                  "instructions" + (f"; goal <= {goal}" if goal else "; what resolving keys adds to a function"))


def run(runs: int, table: common.Table) -> None:
    functions = {name: dotted.rpartition(".")[0] for name, dotted in sorted(FUNCTIONS.items())}
    cases = _import_cases(functions)
    from functions.api.work import app as work

    lazy = work.app.lazy_routers.modules
    for module in lazy:
        path = _sample(module)
        cases[f"work first {module}"] = (_first_request(path), _WORK_READY)
    common.progress(f"cold imports: {len(cases)} cases, {runs} fresh interpreters each")
    times = medians(cases, runs)
    ref_cpu, ref_wall = times[REFERENCE]

    def row(label: str, name: str, goal: str = "", note: str = "") -> None:
        cpu, wall = times[name]
        goal = f"; goal <= {goal}" if goal else ""
        table.row(label, runs, f"{cpu:.1f} ms", f"{ref_cpu:.0f} ms", cpu / ref_cpu,
                  f"CPU{goal} (wall {wall:.0f} vs {ref_wall:.0f} ms){note}")

    for name, module in functions.items():
        row(f"a. import {module}", name, "1.00")
    row(f"b. import {KEYS}", KEYS, "0.50")
    row(f"b. ... after {REFERENCE.rpartition('.')[2]}", "keys after the reference", "",
        "; what resolving keys adds to a function")
    for module in lazy:
        row(f"c. work's first request, {module}", f"work first {module}", "",
            "; its module's import and include (a warm request: under 1 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 interpreters per case instead of 9")
    parser.add_argument("--runs", type=int, help="fresh interpreters per case")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind) instead of CPU time")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 9)
    started = time.perf_counter()
    print(f"machine: {os.cpu_count()} cores, load average {common.load()} before the run; {sys.version.split()[0]}")
    table = common.Table()
    table.header()
    if args.instructions:
        run_instructions(table)
    else:
        run(runs, table)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average {common.load()} at the end")


if __name__ == "__main__":
    main()
