"""Cold starts: the streaming runtime against Lambda's own, and what SnapStart would change.

  a. a cold start under a runtime: a fresh interpreter started against a stand-in for Lambda's Runtime
     API (functions.local.runtime_api) until its first invocation is answered: the init (imports)
     and one request. Lambda's own runtime client (awslambdaric, as the managed Python runtime runs
     it) with the minimal Powertools handler (bench/reference/minimal_handler.py) is the reference;
     then the durable function under awslambdaric (today's) and under the streaming runtime
     (functions.lambda_runtime), answered whole (the HTTP API) and streamed (a Function URL).
  b. SnapStart, per surface function: its import (what a restore no longer runs), the after-restore
     hooks (functions.snapstart: what a restore still runs), and the price of each against the init
     it replaces. Lambda's own part of a restore (loading the snapshot) cannot be measured here: the
     figure is the hooks' part, the part we own.

Each figure is the median of fresh interpreters taking turns (CPU time: a loaded machine stretches
wall time). No database is needed: `.venv/bin/python bench/cold_start.py [--quick]`.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench import common  # noqa: E402
from bench.cold_imports import REFERENCE, _env, medians  # noqa: E402
from bench.cost_model import MB_PER_VCPU, PRICES, init_ms  # noqa: E402
from functions import sizes  # noqa: E402
from functions.local.events import http_event  # noqa: E402
from functions.local.runtime_api import RuntimeApi  # noqa: E402
from functions.routes import FUNCTIONS, match  # noqa: E402

# SnapStart's list prices (us-east-1): the snapshot's cache while its version exists, and each restore.
SNAPSTART_CACHE_GB_S = 0.0000015046
SNAPSTART_RESTORE_GB = 0.0001397998
SECONDS_PER_MONTH = 730 * 3600
DURABLE = "functions.api.durable.app.handler"
RUNTIMES = {
    "awslambdaric": ["-m", "awslambdaric"],
    "streaming": ["-m", "functions.lambda_runtime"],
}


def _bench_env() -> dict[str, str]:
    """Fresh interpreters as Lambda starts them (bytecode cached), with no database to reach: the
    requests measured need none, and the pool connects in the background."""
    return {**_env(), "AWS_LAMBDA_FUNCTION_NAME": "postbox-bench", "DATABASE_URL": "postgresql://127.0.0.1:1/none",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}


def _http_api_event(method: str, path: str) -> dict:
    found = match(method, path)
    route, params = found if found else (None, None)
    return http_event(method, path, route=route, path_parameters=params)


def cold_start(runtime: str, handler: str, event: dict, env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) from a fresh interpreter's start to its first invocation's answer."""
    api = RuntimeApi()
    try:
        answer = api.invoke("cold", event)
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *RUNTIMES[runtime], handler], cwd=ROOT,
                                env={**env, "AWS_LAMBDA_RUNTIME_API": api.address},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not answer.done.wait(60):
            proc.kill()
            raise RuntimeError(f"{runtime} {handler}: no answer")
        wall = (time.perf_counter() - started) * 1000
        proc.kill()
        _, _, usage = os.wait4(proc.pid, 0)
        return wall, (usage.ru_utime + usage.ru_stime) * 1000
    finally:
        api.close()


def run_runtimes(runs: int, table: common.Table) -> None:
    env = {**_bench_env(), "POWERTOOLS_TRACE_DISABLED": "true"}
    keyless = "/v1/stream/cold"  # answered 401 without the database
    cases = {
        "reference": ("awslambdaric", f"{REFERENCE}.handler", _http_api_event("POST", "/send")),
        "durable, awslambdaric": ("awslambdaric", DURABLE, _http_api_event("GET", keyless)),
        "durable, streaming runtime, whole": ("streaming", DURABLE, _http_api_event("GET", keyless)),
        "durable, streaming runtime, streamed": ("streaming", DURABLE, http_event("GET", keyless)),
    }
    common.progress(f"cold starts under a runtime: {len(cases)} cases, {runs} fresh interpreters each")
    for runtime, handler, event in cases.values():
        cold_start(runtime, handler, event, env)  # writes the bytecode
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, (runtime, handler, event) in cases.items():
            samples[name].append(cold_start(runtime, handler, event, env))
    found = {name: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
             for name, s in samples.items()}
    ref_wall, ref_cpu = found["reference"]
    for name, (wall, cpu) in found.items():
        if name != "reference":
            table.row(f"a. {name}", runs, f"{cpu:.0f} ms", f"{ref_cpu:.0f} ms", cpu / ref_cpu,
                      f"CPU to the first answer (wall {wall:.0f} vs {ref_wall:.0f} ms); reference: awslambdaric"
                      " + minimal handler")
    aws_cpu, streaming_cpu = found["durable, awslambdaric"][1], found["durable, streaming runtime, whole"][1]
    print(f"   the streaming runtime's own cost: {streaming_cpu - aws_cpu:+.0f} ms of CPU per cold start "
          f"({(streaming_cpu - aws_cpu) / aws_cpu * 100:+.0f} %)")


_HOOKS = """
import os, time
os.environ["AWS_LAMBDA_INITIALIZATION_TYPE"] = "snap-start"
import {module}
from functions import snapstart
snapstart.run_before_snapshot()
cpu = time.process_time(); wall = time.perf_counter()
snapstart.run_after_restore()
print(time.process_time() - cpu, time.perf_counter() - wall)
"""


def _hooks(module: str, env: dict[str, str]) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _HOOKS.format(module=module)], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[-2]) * 1000, float(out[-1]) * 1000


def run_snapstart(runs: int, table: common.Table) -> None:
    functions = {name: dotted.rpartition(".")[0] for name, dotted in sorted(FUNCTIONS.items())}
    common.progress(f"SnapStart: {len(functions)} surface functions, {runs} fresh interpreters each")
    imports = medians({REFERENCE: (f"import {REFERENCE}", ""),
                       **{name: (f"import {module}", "") for name, module in functions.items()}}, runs)
    ref_cpu = imports[REFERENCE][0]
    env = _bench_env()
    for name, module in functions.items():
        hooks = [_hooks(module, env) for _ in range(runs)]
        hook_cpu = statistics.median(c for c, _ in hooks)
        mb = sizes.surface_mb(name)
        gb = mb / 1024
        init = init_ms(imports[name][0] / 1000, mb)
        init_usd = init / 1000 * gb * PRICES["lambda_arm_gb_s"]
        restore_usd = gb * SNAPSTART_RESTORE_GB + math.ceil(hook_cpu / min(1.0, mb / MB_PER_VCPU)) / 1000 * gb * \
            PRICES["lambda_arm_gb_s"]
        cache_month = gb * SNAPSTART_CACHE_GB_S * SECONDS_PER_MONTH
        table.row(f"b. {name}: import", runs, f"{imports[name][0]:.0f} ms", f"{ref_cpu:.0f} ms",
                  imports[name][0] / ref_cpu, f"CPU; goal <= 1.00; at {mb} MB an init of ~{init} ms, "
                  f"${init_usd * 1e6:.2f} per million cold starts")
        table.row(f"b. {name}: after-restore hooks", runs, f"{hook_cpu:.1f} ms", f"{ref_cpu:.0f} ms",
                  hook_cpu / ref_cpu, f"CPU; SnapStart ${restore_usd * 1e6:.2f} per million restores "
                  f"({restore_usd / init_usd:.1f}x the init) + ${cache_month:.2f} a month for the snapshot")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 interpreters per case instead of 9")
    args = parser.parse_args()
    runs = 3 if args.quick else 9
    started = time.perf_counter()
    print(f"machine: {os.cpu_count()} cores, load average {common.load()} before the run; {sys.version.split()[0]}")
    table = common.Table()
    table.header()
    run_runtimes(runs, table)
    run_snapstart(runs, table)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average {common.load()} at the end")


if __name__ == "__main__":
    main()
