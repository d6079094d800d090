"""Settings read from the environment once per process (Lambda container or local runtime)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


@dataclass(frozen=True)
class Settings:
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
    long_poll_ms: int
    key_cache_seconds: int
    region: str | None
    export_bucket: str | None  # GDPR exports go to this S3 bucket; without one they stay in the database
    export_url_seconds: int  # how long a presigned download URL of an export works
    export_retention_days: int  # how long an export is kept (the bucket's lifecycle rule says the same)


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
        long_poll_ms=_int("POSTBOX_LONG_POLL_MS", 20000),
        key_cache_seconds=_int("POSTBOX_KEY_CACHE_SECONDS", 30),
        region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        export_bucket=os.environ.get("POSTBOX_EXPORT_BUCKET") or None,
        export_url_seconds=_int("POSTBOX_EXPORT_URL_SECONDS", 900),
        export_retention_days=_int("POSTBOX_EXPORT_RETENTION_DAYS", 7),
    )


def reset() -> None:
    """Forget cached settings (the local runtime and tests change the environment)."""
    settings.cache_clear()
