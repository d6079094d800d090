"""Per-stack configuration (`pulumi config set postbox:<key> <value>`), read once, with defaults.

Every size and limit lives here so a stack changes by config, never by code. docs/deploy.md lists
the keys; keep the two in step.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, replace
from typing import Any

import pulumi

# The values CloudWatch Logs accepts (0 = never expire).
LOG_RETENTION_DAYS = {0, 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
                      3288, 3653}  # fmt: skip
# Lambda's log levels (its JSON log format filters by them).
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
# The front doors (functions.door) and what a stack gets unless its config says otherwise.
API_GATEWAY, FUNCTION_URL = DOORS = ("api-gateway", "function-url")
FUNCTION_URL_RESERVED_CONCURRENCY = 50  # per surface function, when its URL is the front door
DEFAULT_LOG_SAMPLE_RATE = 0.01
DEFAULT_LOG_SLOW_MS = 1000
FUNCTION_TIMEOUT_MAX_S = 900  # Lambda's; behind API Gateway the integration's 30 s bound it first
# Cells (`cells:`): the one cell of a stack that names none, and what a cell's config may say.
DEFAULT_CELL = "cell-1"  # postbox.cells: POSTBOX_CELL_NAME's default
CELL_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")  # postbox.cells.CELL_NAME
CELL_KEYS = ("name", "minAcu", "maxAcu", "region", "vpcCidr")
MAX_CELLS = 8  # POSTBOX_CELLS names every cell in each function's environment (Lambda's 4 KB in all)
AURORA_MAX_ACU = 256


@dataclass(frozen=True)
class CellSpec:
    """One cell of the stack: an Aurora cluster of its own, with its proxy, secrets and schedules."""

    name: str
    min_acu: float
    max_acu: float  # also its weight: new tenants go to the cell with the most room per ACU
    region: str | None = None  # None: the stack's
    vpc_cidr: str | None = None  # its own VPC's, set for a cell in another region only (`remote`)

    def remote(self, stack_region: str | None) -> bool:
        """In another region than the stack's: a VPC, a provider and a peering of its own."""
        return self.region is not None and self.region != stack_region


@dataclass(frozen=True)
class Settings:
    stack: str
    prefix: str  # physical-name prefix of every named resource: postbox-<stack>
    # network
    vpc_cidr: str
    az_count: int
    # database
    db_engine_version: str
    db_min_acu: float
    db_max_acu: float
    db_instances: int
    db_backup_retention_days: int
    deletion_protection: bool
    skip_final_snapshot: bool
    # functions
    api_memory_mb: int | None  # None: each function's size from the memory table
    api_timeout_s: int
    agent_memory_mb: int | None  # None: each function's size from the memory table
    agent_timeout_s: int
    migrate_memory_mb: int | None  # None: each function's size from the memory table
    migrate_timeout_s: int
    long_poll_ms: int
    log_retention_days: int
    application_log_level: str  # Lambda's JSON log filter for the functions' own lines
    system_log_level: str  # and for Lambda's (START/END/REPORT are INFO)
    key_cache_seconds: int  # how long a function remembers a resolved key: the bound on a revocation
    consumer_function_pattern: str
    tracing: bool
    # api: the front door (API Gateway, or each surface function's own URL) and what it keeps
    front_door: str  # api-gateway | function-url
    throttle_burst: int
    throttle_rate: float
    cors_allow_origins: tuple[str, ...]  # function URLs' CORS: the origins browsers may call from
    log_sample_rate: float  # the share of quick successful requests whose access line is written
    log_slow_ms: int  # a request at least this slow always writes its access line
    # schedules
    agents_enabled: bool
    agent_retries: int  # async retries of a failed agent run before it lands in the failures queue
    agent_reserved_concurrency: int  # 0 = unreserved
    dispatch_reserved_concurrency: int
    api_reserved_concurrency: int
    # database roles and secrets
    listen_connection_limit: int  # direct LISTEN connections of the postbox_listen role
    app_secret_rotation_days: int
    encryption_key_rotation_days: int
    # GDPR exports
    export_retention_days: int  # the export bucket's lifecycle rule (and what job statuses say)
    export_url_seconds: int  # how long a presigned download URL works
    # alarms
    alarm_email: str | None
    alarm_5xx_threshold: int
    alarm_db_cpu_percent: int
    alarm_db_connections: int
    alarm_pinned_connections: int
    alarm_oldest_message_seconds: int
    # streamed answers and cold starts (infra/streaming.py)
    stream_max_seconds: int  # the longest a streamed answer (an open SSE read) lasts on AWS
    durable_streaming_api: bool  # a streaming REST API beside the HTTP API for the durable surface
    snap_start: tuple[str, ...]  # the surface functions published with SnapStart
    # cells: the first is the default (today's database, the directory's home); one `cell-1` from
    # the database settings above when the config names none (`cells_named` False: today's stack)
    cells: tuple[CellSpec, ...] = ()
    cells_named: bool = False
    region: str | None = None  # the stack's region when its config or environment says it


def load() -> Settings:
    cfg = pulumi.Config("postbox")
    stack = pulumi.get_stack()
    is_dev = stack == "dev"

    def integer(key: str, default: int) -> int:
        value = cfg.get_int(key)
        return default if value is None else value

    def optional_integer(key: str) -> int | None:  # None: not set in the stack's config
        return cfg.get_int(key)

    def number(key: str, default: float) -> float:
        value = cfg.get_float(key)
        return default if value is None else value

    def boolean(key: str, default: bool) -> bool:
        value = cfg.get_bool(key)
        return default if value is None else value

    deletion_protection = boolean("deletionProtection", not is_dev)
    front_door = cfg.get("frontDoor") or API_GATEWAY
    s = Settings(
        stack=stack,
        prefix=cfg.get("namePrefix") or f"postbox-{stack}",
        vpc_cidr=cfg.get("vpcCidr") or "10.42.0.0/16",
        az_count=integer("azCount", 2),
        db_engine_version=cfg.get("dbEngineVersion") or "16.6",
        db_min_acu=number("dbMinAcu", 0.5),
        db_max_acu=number("dbMaxAcu", 4),
        db_instances=integer("dbInstances", 1),
        db_backup_retention_days=integer("dbBackupRetentionDays", 1 if is_dev else 7),
        deletion_protection=deletion_protection,
        skip_final_snapshot=boolean("dbSkipFinalSnapshot", not deletion_protection),
        api_memory_mb=optional_integer("apiMemoryMb"),
        api_timeout_s=integer("apiTimeoutSeconds", 29),
        agent_memory_mb=optional_integer("agentMemoryMb"),
        agent_timeout_s=integer("agentTimeoutSeconds", 60),
        migrate_memory_mb=optional_integer("migrateMemoryMb"),
        migrate_timeout_s=integer("migrateTimeoutSeconds", 300),
        long_poll_ms=integer("longPollMs", 20000),
        log_retention_days=integer("logRetentionDays", 14),
        application_log_level=(cfg.get("applicationLogLevel") or "INFO").upper(),
        system_log_level=(cfg.get("systemLogLevel") or "WARN").upper(),
        key_cache_seconds=integer("keyCacheSeconds", 30),
        consumer_function_pattern=cfg.get("consumerFunctionPattern") or "postbox-consumer-*",
        tracing=boolean("tracing", False),
        front_door=front_door,
        throttle_burst=integer("throttleBurst", 500),
        cors_allow_origins=tuple(o.strip() for o in (cfg.get("corsAllowOrigins") or "*").split(",") if o.strip()),
        log_sample_rate=number("logSampleRate", DEFAULT_LOG_SAMPLE_RATE),
        log_slow_ms=integer("logSlowMs", DEFAULT_LOG_SLOW_MS),
        throttle_rate=number("throttleRate", 1000),
        agents_enabled=boolean("agentsEnabled", True),
        agent_retries=integer("agentRetries", 2),
        agent_reserved_concurrency=integer("agentReservedConcurrency", 2),
        dispatch_reserved_concurrency=integer("dispatchReservedConcurrency", 10),
        # Behind function URLs, each surface's reserved concurrency is what caps the API as a whole.
        api_reserved_concurrency=integer("apiReservedConcurrency",
                                         FUNCTION_URL_RESERVED_CONCURRENCY if front_door == FUNCTION_URL else 0),
        listen_connection_limit=integer("listenConnectionLimit", 100),
        app_secret_rotation_days=integer("appSecretRotationDays", 30),
        encryption_key_rotation_days=integer("encryptionKeyRotationDays", 90),
        export_retention_days=integer("exportRetentionDays", 7),
        export_url_seconds=integer("exportUrlSeconds", 900),
        alarm_email=cfg.get("alarmEmail") or None,
        alarm_5xx_threshold=integer("alarm5xxThreshold", 5),
        alarm_db_cpu_percent=integer("alarmDbCpuPercent", 80),
        alarm_db_connections=integer("alarmDbConnections", 400),
        alarm_pinned_connections=integer("alarmPinnedConnections", 5),
        alarm_oldest_message_seconds=integer("alarmOldestMessageSeconds", 300),
        stream_max_seconds=integer("streamMaxSeconds", 840),
        durable_streaming_api=boolean("durableStreamingApi", front_door == API_GATEWAY),
        snap_start=_functions(cfg.get("snapStart") or "none"),
    )
    listed = cfg.get_object("cells")
    region = pulumi.Config("aws").get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    s = replace(s, region=region, cells_named=listed is not None,
                cells=(CellSpec(DEFAULT_CELL, s.db_min_acu, s.db_max_acu),) if listed is None
                else _cells(listed, s.db_min_acu, s.db_max_acu))
    s = replace(s, cells=_networks(s))
    _check(s)
    return s


def _cells(listed: Any, min_acu: float, max_acu: float) -> tuple[CellSpec, ...]:
    """`cells:` as config gives it (a YAML list of mappings), refused by name where it is wrong."""
    if not isinstance(listed, list) or not listed:
        raise ValueError("cells must be a non-empty list of cells, each a mapping with a name")
    if len(listed) > MAX_CELLS:
        raise ValueError(f"cells: at most {MAX_CELLS} (every function's environment names every cell)")
    out: list[CellSpec] = []
    for i, item in enumerate(listed):
        if not isinstance(item, dict):
            raise ValueError(f"cells[{i}] must be a mapping ({', '.join(CELL_KEYS)}), not {item!r}")
        unknown = sorted(set(item) - set(CELL_KEYS))
        if unknown:
            raise ValueError(f"cells[{i}]: unknown key {', '.join(unknown)} (a cell has {', '.join(CELL_KEYS)})")
        name = item.get("name")
        if not isinstance(name, str) or not CELL_NAME.fullmatch(name):
            raise ValueError(f"cells[{i}]: name must be 1-32 of a-z, 0-9 and -, beginning with a letter;"
                             f" not {name!r}")
        if any(c.name == name for c in out):
            raise ValueError(f"cells: two cells are named {name}")
        acu = {}
        for key, default in (("minAcu", min_acu), ("maxAcu", max_acu)):
            value = item.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"cells[{i}] ({name}): {key} must be a number of ACUs, not {value!r}")
            acu[key] = float(value)
        if not 0 <= acu["minAcu"] <= acu["maxAcu"] <= AURORA_MAX_ACU or acu["maxAcu"] <= 0:
            raise ValueError(f"cells[{i}] ({name}): need 0 <= minAcu <= maxAcu <= {AURORA_MAX_ACU} and maxAcu > 0"
                             " (maxAcu is the cell's weight when tenants are placed)")
        region = item.get("region")
        if region is not None and (not isinstance(region, str) or not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region)):
            raise ValueError(f"cells[{i}] ({name}): region must be an AWS region such as eu-west-1, not {region!r}")
        cidr = item.get("vpcCidr")
        if cidr is not None:
            try:
                cidr = str(ipaddress.IPv4Network(cidr))
            except (TypeError, ValueError):
                raise ValueError(f"cells[{i}] ({name}): vpcCidr must be an IPv4 network such as 10.43.0.0/16,"
                                 f" not {cidr!r}") from None
        out.append(CellSpec(name, acu["minAcu"], acu["maxAcu"], region, cidr))
    return tuple(out)


def _networks(s: Settings) -> tuple[CellSpec, ...]:
    """Each cell in another region with its VPC's CIDR: its `vpcCidr`, else the block of the stack's
    size that follows the stack's by the cell's place in the list (10.42.0.0/16: the second cell's
    10.43.0.0/16). The peered VPCs route to each other by CIDR, so none may overlap another."""
    if any(c.region is not None and c.region != s.region for c in s.cells) and s.region is None:
        named = next(c for c in s.cells if c.region is not None)
        raise ValueError(f"cells: {named.name} names region {named.region}: set aws:region so the stack's region"
                         " is known (a cell in another region gets a VPC of its own, peered with the stack's)")
    if s.cells[0].remote(s.region):
        raise ValueError(f"cells: the first cell ({s.cells[0].name}) is the stack's database and holds the directory:"
                         " it is in the stack's region")
    home = ipaddress.IPv4Network(s.vpc_cidr)
    taken = {"the stack's VPC": home}
    out = []
    for i, cell in enumerate(s.cells):
        if not cell.remote(s.region):
            if cell.vpc_cidr is not None:
                raise ValueError(f"cells: {cell.name} is in the stack's region, in the stack's VPC: vpcCidr is only"
                                 " for a cell in another region")
            out.append(cell)
            continue
        if cell.vpc_cidr is None:
            start = int(home.network_address) + i * home.num_addresses
            if start + home.num_addresses > 2**32:
                raise ValueError(f"cells: {cell.name}: no block of {home.prefixlen} bits follows vpcCidr"
                                 f" {home} for it: give it a vpcCidr")
            cell = replace(cell, vpc_cidr=str(ipaddress.IPv4Network((start, home.prefixlen))))
        cidr = ipaddress.IPv4Network(cell.vpc_cidr)
        if not 16 <= cidr.prefixlen <= 20 or 2 ** (20 - cidr.prefixlen) < s.az_count:
            raise ValueError(f"cells: {cell.name}: vpcCidr {cidr} must be /16 to /20 and hold a /20 subnet per AZ"
                             f" (azCount {s.az_count})")
        for whose, other in taken.items():
            if cidr.overlaps(other):
                raise ValueError(f"cells: {cell.name}'s VPC {cidr} overlaps {whose} ({other}): the peered VPCs"
                                 " route by CIDR; give it a vpcCidr of its own")
        taken[f"cell {cell.name}'s VPC"] = cidr
        out.append(cell)
    return tuple(out)


def _functions(value: str) -> tuple[str, ...]:
    """`snapStart`: surface function names (comma-separated), `surfaces` (all of them) or `none`."""
    from functions.routes import FUNCTIONS

    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["none"]:
        return ()
    if names == ["surfaces"]:
        return tuple(FUNCTIONS)
    unknown = sorted(set(names) - set(FUNCTIONS))
    if unknown:
        raise ValueError(f"snapStart names surface functions ({', '.join(FUNCTIONS)}), `surfaces` or `none`;"
                         f" not {', '.join(unknown)}")
    return tuple(names)


def _check(s: Settings) -> None:
    """Fail the preview, not the deploy, on settings AWS would reject or that cannot work."""
    for cell in s.cells[1:]:  # the first cell's cluster and proxy keep the stack's own names
        if len(f"{s.prefix}-{cell.name}") > 60:
            raise ValueError(f"cells: {cell.name}: its cluster and proxy are named {s.prefix}-{cell.name}, over RDS"
                             " Proxy's 60 characters: a shorter cell name (or namePrefix)")
    if s.az_count < 2:
        raise ValueError("azCount must be at least 2 (Aurora and RDS Proxy need two AZs)")
    if not 0 <= s.db_min_acu <= s.db_max_acu:
        raise ValueError("need 0 <= dbMinAcu <= dbMaxAcu")
    if s.db_instances < 1:
        raise ValueError("dbInstances must be at least 1")
    if s.front_door not in DOORS:
        raise ValueError(f"frontDoor must be one of {', '.join(DOORS)}")
    # API Gateway HTTP APIs cut every integration at 30 s; a long poll must end before the function.
    if s.front_door == API_GATEWAY and not 1 <= s.api_timeout_s <= 30:
        raise ValueError("apiTimeoutSeconds must be 1..30 (the HTTP API integration limit)")
    if not 1 <= s.api_timeout_s <= FUNCTION_TIMEOUT_MAX_S:
        raise ValueError(f"apiTimeoutSeconds must be 1..{FUNCTION_TIMEOUT_MAX_S} (Lambda's limit)")
    if not 0 <= s.log_sample_rate <= 1:
        raise ValueError("logSampleRate must be 0..1 (the share of quick successful requests logged)")
    if s.log_slow_ms < 0:
        raise ValueError("logSlowMs must not be negative")
    if not s.cors_allow_origins or len(s.cors_allow_origins) > 100:
        raise ValueError("corsAllowOrigins must name 1..100 origins (or *)")
    if s.long_poll_ms >= s.api_timeout_s * 1000:
        raise ValueError("longPollMs must be shorter than apiTimeoutSeconds")
    # <prefix><tenant: 32 hex>-<name>: at least one character of <name> within Lambda's 64.
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,30}\*", s.consumer_function_pattern):
        raise ValueError("consumerFunctionPattern must be a prefix of 1-30 letters, digits, - or _ and one"
                         " trailing * (e.g. postbox-consumer-*)")
    if s.application_log_level not in LOG_LEVELS or s.system_log_level not in LOG_LEVELS:
        raise ValueError(f"applicationLogLevel and systemLogLevel must be one of {', '.join(LOG_LEVELS)}")
    if not 0 <= s.key_cache_seconds <= 300:
        raise ValueError("keyCacheSeconds must be 0..300 (a revoked key is refused within that time)")
    if s.log_retention_days not in LOG_RETENTION_DAYS:
        raise ValueError(f"logRetentionDays must be one of {sorted(LOG_RETENTION_DAYS)}")
    if not 0 <= s.agent_retries <= 2:
        raise ValueError("agentRetries must be 0..2 (Lambda's asynchronous retry limit)")
    if min(s.agent_reserved_concurrency, s.dispatch_reserved_concurrency, s.api_reserved_concurrency) < 0:
        raise ValueError("reserved concurrency settings must not be negative (0 = unreserved)")
    if not 1 <= s.app_secret_rotation_days <= 365 or not 1 <= s.encryption_key_rotation_days <= 365:
        raise ValueError("rotation periods must be 1..365 days")
    if not 1 <= s.export_retention_days <= 365:
        raise ValueError("exportRetentionDays must be 1..365")
    if not 60 <= s.export_url_seconds <= 43200:
        raise ValueError("exportUrlSeconds must be 60..43200 (a role's session bounds a presigned URL anyway)")
    if s.listen_connection_limit < 1:
        raise ValueError("listenConnectionLimit must be at least 1")
    if s.throttle_burst < 0 or s.throttle_rate < 0:
        raise ValueError("throttleBurst and throttleRate must not be negative")
    # A streamed answer ends 5 s before Lambda's 15-minute timeout (functions.lambda_runtime).
    if not 1 <= s.stream_max_seconds <= 895:
        raise ValueError("streamMaxSeconds must be 1..895 (Lambda ends an invocation at 900 s)")
