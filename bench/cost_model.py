"""The cost model bench/cost.py applies to its measurements: list prices, how a local duration
becomes a Lambda bill, what a million messages costs, the idle floor of a stack, and SQS."""

from __future__ import annotations

import math

PRICES = {  # us-east-1 list prices, USD
    "apigw_http_per_million": 1.00,
    "lambda_request_per_million": 0.20,
    "lambda_arm_gb_s": 0.0000133334,
    "aurora_acu_hour": 0.12,  # Serverless v2, Aurora Standard
    "aurora_io_per_million": 0.20,  # Aurora Standard
    "aurora_storage_gb_month": 0.10,
    "proxy_acu_hour": 0.015,  # RDS Proxy on Serverless v2, billed for at least 8 ACU
    "proxy_min_acu": 8,
    "endpoint_az_hour": 0.01,
    "secret_month": 0.40,
    "alarm_month": 0.10,
    "dashboard_month": 3.00,
    "logs_ingest_gb": 0.50,
    "sqs_per_million": 0.40,
    "ec2_m7g_large_hour": 0.0816,  # self-hosted pgmq: one instance and its volume
    "ebs_gp3_gb_month": 0.08,
}
HOURS_PER_MONTH = 730
API_MEMORY_MB, AGENT_MEMORY_MB = 512, 256
MB_PER_VCPU = 1769
VCPU_PER_ACU = 0.25
PROXY_HOP_MS = 1.0  # functions -> RDS Proxy -> Aurora, per request (one round trip on the hot paths)
# What a request writes to CloudWatch Logs is measured per request (each line's bytes + 26 per event, as
# CloudWatch counts them): the function's own lines, captured from its handler (the EMF record of what it
# counted; its access line at the sampling rate). Behind API Gateway its access line comes on top: about
# 147 bytes + 26. No START/END/REPORT (system log level WARN), no second invocation (no authorizer).
APIGW_ACCESS_LINE_BYTES = 147 + 26
DOORS = ("api-gateway", "function-url")
BATCHES = (1, 10, 100)
MILLION = 1_000_000


def lambda_ms(wall: float, cpu: float, memory_mb: int, hop_ms: float = PROXY_HOP_MS) -> int:
    """Billed ms on Lambda: CPU scaled to the memory's vCPU share, the wait as measured, the proxy hop."""
    share = min(1.0, memory_mb / MB_PER_VCPU)
    return math.ceil(cpu / share * 1000 + (wall - cpu) * 1000 + hop_ms)


def per_million(requests: dict[str, tuple[float, float, float, float]], n: int,
                db_per_msg: tuple[float, float], memory_mb: int = API_MEMORY_MB,
                door: str = "api-gateway") -> dict[str, float]:
    """Cost of a million messages through one surface (of memory_mb) at batch size n, through `door`;
    `requests`: label -> (wall s, cpu s, calls per cycle, log bytes the function writes per call)."""
    wal_per_msg, db_cpu_per_msg = db_per_msg
    cycles = MILLION / n
    reqs = cycles * sum(calls for _, _, calls, _ in requests.values())
    gb_s = log_bytes = 0.0
    for wall, cpu, calls, logged in requests.values():
        gb_s += cycles * calls * lambda_ms(wall, cpu, memory_mb) / 1000 * memory_mb / 1024
        log_bytes += cycles * calls * (logged + (APIGW_ACCESS_LINE_BYTES if door == "api-gateway" else 0))
    acu_h = db_cpu_per_msg * MILLION / VCPU_PER_ACU / 3600
    out = {
        "requests": reqs,
        "api": reqs / MILLION * PRICES["apigw_http_per_million"] if door == "api-gateway" else 0.0,
        "lambda_req": reqs / MILLION * PRICES["lambda_request_per_million"],  # one invocation per request
        "lambda_gb_s": gb_s * PRICES["lambda_arm_gb_s"],
        "aurora_acu": acu_h * PRICES["aurora_acu_hour"],
        "proxy": acu_h * PRICES["proxy_acu_hour"],  # the proxy is billed on the database's ACU (above its floor)
        "aurora_io": wal_per_msg * MILLION / 4096 / MILLION * PRICES["aurora_io_per_million"],
        "logs": log_bytes / 1e9 * PRICES["logs_ingest_gb"],
        "log_bytes_per_request": log_bytes / reqs,
        "acu_hours": acu_h,
    }
    out["total"] = sum(out[k] for k in ("api", "lambda_req", "lambda_gb_s", "aurora_acu", "proxy", "aurora_io", "logs"))
    return out


def invocation_usd(wall: float, cpu: float, memory_mb: int, hop_ms: float = PROXY_HOP_MS) -> float:
    """What one invocation of memory_mb bills: its duration in GB-seconds and the request charge."""
    gb_s = lambda_ms(wall, cpu, memory_mb, hop_ms) / 1000 * memory_mb / 1024
    return gb_s * PRICES["lambda_arm_gb_s"] + PRICES["lambda_request_per_million"] / MILLION


def init_ms(import_cpu: float, memory_mb: int) -> int:
    """A cold start's init at memory_mb: the function's import CPU (measured on a full core) scaled to
    the memory's vCPU share, as the model scales a request's CPU (an upper bound if Lambda lends an
    init more CPU than its share)."""
    return math.ceil(import_cpu / min(1.0, memory_mb / MB_PER_VCPU) * 1000)


SLOWER_AT_MOST = 1.5  # a function someone waits on may bill (and answer) at most this much slower than at 1,024 MB
INIT_AT_MOST_MS = 2000  # and its cold start's init (import CPU at its share) may take at most this long


def choose_mb(wall: float, cpu: float, import_cpu: float, sizes: tuple[int, ...], waited_on: bool,
              hop_ms: float = PROXY_HOP_MS) -> int:
    """The size a function should have: the cheapest warm invocation; for one a caller waits on (an API
    surface, the migration a deploy waits for), the cheapest whose warm duration is within
    SLOWER_AT_MOST of the largest size's and whose init takes at most INIT_AT_MOST_MS. (An init is
    CPU-bound, so below one vCPU it bills the same GB-seconds at every size: only its wait differs.)"""
    fastest = lambda_ms(wall, cpu, max(sizes), hop_ms)
    fit = [mb for mb in sizes if not waited_on or (lambda_ms(wall, cpu, mb, hop_ms) <= SLOWER_AT_MOST * fastest
                                                    and init_ms(import_cpu, mb) <= INIT_AT_MOST_MS)]
    return min(fit or [max(sizes)], key=lambda mb: (invocation_usd(wall, cpu, mb, hop_ms), -mb))


def sqs_per_million(n: int) -> float:
    """SQS standard: send, receive and delete, up to 10 messages per request."""
    return 3 * MILLION / min(n, 10) / MILLION * PRICES["sqs_per_million"]


def idle_floor(az_count: int = 2, min_acu: float = 0.5, agent_run_ms: float = 30.0) -> dict[str, float]:
    """A month of a stack nobody calls: what runs and what is billed by the hour."""
    from functions import routes, schedules

    functions = len(routes.FUNCTIONS) + len(schedules.AGENTS) + 1  # and migrate
    alarms = 2 * functions + 8
    agent_runs = sum(30 * 24 * 3600 / a.every_seconds for a in schedules.AGENTS)
    agent_gb_s = agent_runs * math.ceil(agent_run_ms) / 1000 * AGENT_MEMORY_MB / 1024
    return {
        "Aurora Serverless v2 minimum": min_acu * PRICES["aurora_acu_hour"] * HOURS_PER_MONTH,
        "Aurora storage (10 GB)": 10 * PRICES["aurora_storage_gb_month"],
        "RDS Proxy (8 ACU minimum)": PRICES["proxy_min_acu"] * PRICES["proxy_acu_hour"] * HOURS_PER_MONTH,
        f"VPC interface endpoints (3 x {az_count} AZ)": 3 * az_count * PRICES["endpoint_az_hour"] * HOURS_PER_MONTH,
        "Secrets Manager (3 secrets)": 3 * PRICES["secret_month"],
        f"CloudWatch alarms ({alarms})": alarms * PRICES["alarm_month"],
        "CloudWatch dashboard": PRICES["dashboard_month"],
        f"agent runs ({agent_runs:,.0f}/month)": agent_runs / MILLION * PRICES["lambda_request_per_million"]
        + agent_gb_s * PRICES["lambda_arm_gb_s"],
    }
