"""The `postbox` command: `postbox dev` runs everything locally; `postbox admin` manages tenants and keys;
`postbox migrate` applies migrations to DATABASE_URL."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path


def _dev(args: argparse.Namespace) -> int:
    import uvicorn

    from functions.local.gateway import LocalGateway
    from functions.local.runtime import database, dev_key, use_database
    from functions.local.scheduler import Scheduler
    from postbox import db

    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("POSTBOX_POOL_MAX", "20")
    if args.long_poll_ms:
        os.environ["POSTBOX_LONG_POLL_MS"] = str(args.long_poll_ms)
    url, server = database(state)
    applied = use_database(url)
    key = dev_key(state)
    scheduler = Scheduler()
    scheduler.start()
    base = f"http://{args.host}:{args.port}"
    print(f"Postbox is running at {base}", flush=True)
    print(f"  database:  {'embedded, data in ' + str(state / 'pgdata') if server else 'DATABASE_URL'}")
    print(f"  migrations applied now: {', '.join(applied) or 'none (up to date)'}")
    print(f"  development key: {key}   (also in {state / 'dev-key'})")
    print(f"  try: curl -s -H 'apikey: {key}' {base}/api/v1/queues", flush=True)
    try:
        uvicorn.run(LocalGateway(), host=args.host, port=args.port, log_level="warning", lifespan="on")
    finally:
        scheduler.stop()
        db.close_pool()
        if server is not None:
            server.stop()
        print("Postbox stopped.", flush=True)
    return 0


def _connect_admin() -> None:
    from functions.local.runtime import database, use_database

    url, _ = database(Path(os.environ.get("POSTBOX_STATE_DIR", ".postbox")).resolve())
    use_database(url)


def _admin(args: argparse.Namespace) -> int:
    from postbox import errors, tenancy

    _connect_admin()
    try:
        if args.what == "tenant-create":
            tenant = tenancy.create_tenant(args.name, plan=args.plan)
            out: object = {"tenant_id": tenant, "name": args.name, "plan": args.plan}
        elif args.what == "key-create":
            tenant = tenancy.tenant_id_by_name(args.tenant)
            if tenant is None:
                raise errors.NotFound(f"no tenant {args.tenant!r}")
            expires = datetime.now(UTC) + timedelta(days=args.days) if args.days else None
            issued = tenancy.create_key(tenant, args.role, project=args.project, name=args.name,
                                        scopes=tuple(args.scope or ()), expires_at=expires)
            out = {"key": issued.key, "key_id": issued.key_id, "role": issued.role}
        elif args.what == "key-list":
            tenant = tenancy.tenant_id_by_name(args.tenant)
            if tenant is None:
                raise errors.NotFound(f"no tenant {args.tenant!r}")
            out = tenancy.list_keys(tenant)
        elif args.what == "key-revoke":
            tenancy.revoke_key(args.key_id)
            out = {"revoked": args.key_id}
        else:
            out = _flows_admin(args)
    except errors.PostboxError as e:
        print(f"postbox admin: {e.message}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2, default=str))
    return 0


# The flows verbs were first named `streams-*`; the old names still work, with a notice.
RENAMED = {"streams-grant": "flows-grant", "streams-revoke": "flows-revoke", "streams-grants": "flows-grants",
           "streams-host": "flows-host"}


def _flows_admin(args: argparse.Namespace) -> object:
    """Flows grants (the streaming-query quota) and hosted flows queries."""
    from postbox.flows import hosted, quotas

    if args.what in RENAMED:
        print(f"postbox admin: {args.what} is now {RENAMED[args.what]}", file=sys.stderr)
        args.what = RENAMED[args.what]
    if args.what == "flows-grant":
        return quotas.grant(args.tenant, max_queries=args.max_queries, enabled=not args.disabled)
    if args.what == "flows-revoke":
        return quotas.revoke(args.tenant)
    if args.what == "flows-grants":
        return quotas.list_grants()
    return hosted.host_for_tenant(args.tenant, args.factory, reset=args.reset)


def _migrate(_: argparse.Namespace) -> int:
    from functions.local.runtime import use_database

    url = os.environ.get("DATABASE_URL")
    if not url:
        print("postbox migrate: set DATABASE_URL", file=sys.stderr)
        return 2
    print("\n".join(use_database(url)) or "up to date")
    return 0


def _flows_verb(what, verb: str, meaning: str, *, hidden: bool) -> None:
    helps = {
        "flows-grant": "let a tenant register flows queries (create or replace a grant)",
        "flows-revoke": "stop a tenant registering new flows queries",
        "flows-grants": "list flows grants",
        "flows-host": "run a flows query (module:function) as the flows-hosted agent",
    }
    cmd = what.add_parser(verb, help=None if hidden else helps[meaning])
    if meaning in ("flows-grant", "flows-revoke", "flows-host"):
        cmd.add_argument("tenant", help="tenant name or id")
    if meaning == "flows-grant":
        cmd.add_argument("--max-queries", type=int, default=None)
        cmd.add_argument("--disabled", action="store_true")
    if meaning == "flows-host":
        cmd.add_argument("factory")
        cmd.add_argument("--reset", action="store_true")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="postbox", description=__doc__, epilog=CLIENT_EPILOG)
    sub = p.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="run every route and agent locally on an embedded PostgreSQL")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=int(os.environ.get("POSTBOX_PORT", "8080")))
    dev.add_argument("--state-dir", default=os.environ.get("POSTBOX_STATE_DIR", ".postbox"))
    dev.add_argument("--long-poll-ms", type=int, default=None)
    dev.set_defaults(run=_dev)

    admin = sub.add_parser("admin", help="manage tenants and API keys (DATABASE_URL or the local database)")
    what = admin.add_subparsers(dest="what", required=True)
    t = what.add_parser("tenant-create")
    t.add_argument("name")
    t.add_argument("--plan", default="free", choices=["free", "pro", "unlimited"])
    k = what.add_parser("key-create")
    k.add_argument("tenant")
    k.add_argument("--role", default="write", choices=["read", "write", "manage", "anon"])
    k.add_argument("--project", default=None)
    k.add_argument("--name", default="")
    k.add_argument("--scope", action="append")
    k.add_argument("--days", type=int, default=None, help="expire after this many days")
    kl = what.add_parser("key-list")
    kl.add_argument("tenant")
    kr = what.add_parser("key-revoke")
    kr.add_argument("key_id")
    for new, old in [(v, k) for k, v in RENAMED.items()]:
        for verb in (new, old):
            _flows_verb(what, verb, new, hidden=verb == old)
    admin.set_defaults(run=_admin)

    mig = sub.add_parser("migrate", help="apply migrations to DATABASE_URL")
    mig.set_defaults(run=_migrate)
    return p


SERVER_COMMANDS = ("dev", "admin", "migrate")
CLIENT_EPILOG = ("client commands (they talk to the API; `postbox COMMAND --help`): "
                 "queues, dlq, streams, durable, partitioned, flows, tail, login")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in SERVER_COMMANDS and not argv[0].startswith("-"):
        from postbox_client.cli import main as client_main  # the client verbs live with the client

        return client_main(argv)
    logging.basicConfig(level=logging.WARNING)
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
