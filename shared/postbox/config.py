"""Settings read from the environment once per process (Lambda container or local runtime).

The domain's only reader of the environment: every other module asks `settings()` (and makes its
AWS clients through `postbox.aws`), so what a deployment sets is listed here, once.
"""

import os
from functools import lru_cache
from typing import NamedTuple


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def _optional_int(name: str) -> int | None:
    raw = os.environ.get(name)
    return int(raw) if raw else None


class Settings(NamedTuple):
    """What a deployment set, read once. A NamedTuple, not a frozen dataclass: Python 3.11 and 3.12
    compile a dataclass's generated methods from source as the class is made, which for these 38
    fields was 1.4 % of a minimal Powertools handler's cold import in every function (this module
    now: 0.3 %); its annotations are evaluated as it runs for the same reason (postponed, typing
    compiles each one's text)."""

    database_url: str | None
    db_host: str | None
    db_port: int
    db_name: str
    db_sslmode: str
    db_secret_arn: str | None
    db_user: str | None  # with db_iam_auth: the user an IAM token logs in as (no secret read)
    db_iam_auth: bool
    listen_host: str | None  # a direct endpoint for LISTEN only (RDS Proxy pins a LISTENing session)
    listen_user: str | None
    pool_min: int
    pool_max: int
    pool_timeout_s: float  # the longest a request waits for a database connection before its 503
    long_poll_ms: int
    stream_max_seconds: float  # the longest a streamed answer (an open SSE read) stays open
    stream_max_bytes: int  # the most one streamed answer carries before it ends (the client reconnects)
    stream_heartbeat_ms: int  # an idle streamed answer sends a keep-alive this often
    waits_per_tenant: int  # requests one tenant's keys may have waiting at once (long polls, SSE)
    waits_per_address: int  # the same for anonymous callers, by client address
    key_cache_seconds: int
    region: str | None
    export_bucket: str | None  # GDPR exports go to this S3 bucket; without one they stay in the database
    export_url_seconds: int  # how long a presigned download URL of an export works
    export_retention_days: int  # how long an export is kept (the bucket's lifecycle rule says the same)
    on_lambda: bool  # running as a Lambda function (AWS_LAMBDA_FUNCTION_NAME is set)
    function_url_door: bool  # requests come through function URLs, not API Gateway (POSTBOX_FRONT_DOOR)
    consumer_dispatch_function: str | None  # the consumer-dispatch function a send starts (none locally)
    consumer_function_pattern: str  # consumer functions are named <its prefix><tenant hex>-<name>
    consumer_invoker_role_arn: str | None  # the role the dispatcher invokes consumers as, per tenant (AWS)
    encryption_keys: str | None  # the payload key ring as JSON (else read from the secret below)
    encryption_keys_secret_arn: str | None  # the Secrets Manager secret holding the key ring
    encryption_key: str | None  # the one legacy key (base64): opens version-1 envelopes
    work_push_allow_private: bool  # work push deliveries may reach private addresses (local, tests)
    durable_open_tenant: str | None  # the tenant anonymous `/v1/stream/{name}` callers are mapped to
    streams_default_retention: str  # keyed streams' retention when they set none
    streams_default_max_backlog: int | None  # keyed streams' backlog cap when they set none
    cells: str | None  # the deployment's cells as JSON (see `postbox.cells`); none: one cell
    cell_name: str  # the one cell's name when POSTBOX_CELLS names none
    cell_cache_seconds: float  # how long a tenant's cell is taken from the directory without asking again


@lru_cache(maxsize=1)
def settings() -> Settings:
    return Settings(
        database_url=os.environ.get("DATABASE_URL") or None,
        db_host=os.environ.get("POSTBOX_DB_HOST"),
        db_port=_int("POSTBOX_DB_PORT", 5432),
        db_name=os.environ.get("POSTBOX_DB_NAME", "postbox"),
        db_sslmode=os.environ.get("POSTBOX_DB_SSLMODE", "require"),
        db_secret_arn=os.environ.get("POSTBOX_DB_SECRET_ARN"),
        db_user=os.environ.get("POSTBOX_DB_USER") or None,
        db_iam_auth=os.environ.get("POSTBOX_DB_IAM_AUTH", "").lower() in ("1", "true"),
        listen_host=os.environ.get("POSTBOX_DB_LISTEN_HOST") or None,
        listen_user=os.environ.get("POSTBOX_DB_LISTEN_USER") or None,
        pool_min=_int("POSTBOX_POOL_MIN", 0),
        pool_max=_int("POSTBOX_POOL_MAX", 4),
        pool_timeout_s=_float("POSTBOX_POOL_TIMEOUT_S", 3.0),
        long_poll_ms=_int("POSTBOX_LONG_POLL_MS", 20000),
        stream_max_seconds=_float("POSTBOX_STREAM_MAX_SECONDS", 840.0),
        stream_max_bytes=_int("POSTBOX_STREAM_MAX_BYTES", 16 * 1024 * 1024),
        stream_heartbeat_ms=_int("POSTBOX_STREAM_HEARTBEAT_MS", 15000),
        waits_per_tenant=_int("POSTBOX_WAITS_PER_TENANT", 100),
        waits_per_address=_int("POSTBOX_WAITS_PER_ADDRESS", 16),
        key_cache_seconds=_int("POSTBOX_KEY_CACHE_SECONDS", 30),
        region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        export_bucket=os.environ.get("POSTBOX_EXPORT_BUCKET") or None,
        export_url_seconds=_int("POSTBOX_EXPORT_URL_SECONDS", 900),
        export_retention_days=_int("POSTBOX_EXPORT_RETENTION_DAYS", 7),
        on_lambda="AWS_LAMBDA_FUNCTION_NAME" in os.environ,
        function_url_door=os.environ.get("POSTBOX_FRONT_DOOR") == "function-url",
        consumer_dispatch_function=os.environ.get("POSTBOX_CONSUMER_DISPATCH_FUNCTION") or None,
        consumer_function_pattern=os.environ.get("POSTBOX_CONSUMER_FUNCTION_PATTERN") or "postbox-consumer-*",
        consumer_invoker_role_arn=os.environ.get("POSTBOX_CONSUMER_INVOKER_ROLE_ARN") or None,
        encryption_keys=os.environ.get("POSTBOX_ENCRYPTION_KEYS") or None,
        encryption_keys_secret_arn=os.environ.get("POSTBOX_ENCRYPTION_KEYS_SECRET_ARN") or None,
        encryption_key=os.environ.get("POSTBOX_ENCRYPTION_KEY") or None,
        work_push_allow_private=os.environ.get("POSTBOX_WORK_PUSH_ALLOW_PRIVATE", "").lower() in ("1", "true"),
        durable_open_tenant=os.environ.get("POSTBOX_DURABLE_OPEN_TENANT") or None,
        streams_default_retention=os.environ.get("POSTBOX_STREAMS_DEFAULT_RETENTION", "7d"),
        streams_default_max_backlog=_optional_int("POSTBOX_STREAMS_DEFAULT_MAX_BACKLOG"),
        cells=os.environ.get("POSTBOX_CELLS") or None,
        cell_name=os.environ.get("POSTBOX_CELL_NAME") or "cell-1",
        cell_cache_seconds=_float("POSTBOX_CELL_CACHE_SECONDS", 5.0),
    )


def reset() -> None:
    """Forget cached settings (the local runtime and tests change the environment)."""
    settings.cache_clear()
