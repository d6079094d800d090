"""The `postbox` command: `postbox dev` runs everything locally; `postbox admin` manages tenants and keys;
`postbox migrate` applies migrations to DATABASE_URL."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path


def _dev(args: argparse.Namespace) -> int:
    from functions.local import dev_cells
    from functions.local.gateway import serving_gateway
    from functions.local.runtime import database, dev_key, dev_sqs_credential, use_key_ring
    from functions.local.scheduler import PERIODS_ENV, Scheduler, periods_from
    from functions.local.server import Server, serve_workers
    from postbox import config, db

    try:
        periods = periods_from(os.environ.get(PERIODS_ENV, ""))
    except ValueError as e:
        print(f"postbox dev: {e}", file=sys.stderr)
        return 1
    if not _port_free(args.host, args.port):
        print(f"postbox dev: {args.host}:{args.port} is in use (another postbox dev?); choose --port or"
              " POSTBOX_PORT", file=sys.stderr)
        return 1
    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    workers = max(1, args.workers)
    if args.cells is not None and args.cells < 1:
        print(f"postbox dev: --cells must be 1 or more, not {args.cells}", file=sys.stderr)
        return 1
    os.environ.setdefault("POSTBOX_POOL_MIN", "2")  # opened at start (see LocalGateway.preload)
    if args.long_poll_ms:
        os.environ["POSTBOX_LONG_POLL_MS"] = str(args.long_poll_ms)
    os.environ["POSTBOX_REQUEST_LOG"] = "0" if args.quiet else "1"  # read by every gateway worker process
    if args.front_door:  # read by every worker process's gateway and by the functions it calls
        os.environ["POSTBOX_FRONT_DOOR"] = args.front_door
    # SIGTERM (systemd, `docker stop`) stops Postbox as Ctrl-C does: the cleanup below runs (and
    # stops the worker processes, if any).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    server = scheduler = supervisor = None
    try:
        ring = use_key_ring(state)  # before anything seals, and inherited by the worker processes
        url, server = database(state)
        if server is not None:  # a database that dies is started again (and said so on stderr)
            supervisor = _supervise(server)
        try:
            count, applied = dev_cells.choose(state, url, args.cells)
        except (dev_cells.TenantsHeld, ValueError) as e:
            print(f"postbox dev: {e}", file=sys.stderr)
            return 1
        # Each process has a pool per cell; together they stay well under PostgreSQL's 100 connections.
        per_process = 20 if workers == 1 else max(8, 80 // (workers + 1))
        os.environ.setdefault("POSTBOX_POOL_MAX", str(max(4, per_process // count)))
        config.reset()  # the pools opened from here on take that size
        key = dev_key(state)
        if workers == 1:  # else each worker process builds its own (functions.local.server)
            http_server = Server(serving_gateway(request_log=not args.quiet), args.host, args.port)
        scheduler = Scheduler(periods=periods)
        scheduler.start()
        base = f"http://{args.host}:{args.port}"
        # The client run from this folder finds the server here, whatever --port or POSTBOX_PORT chose.
        (state / "dev-url").write_text(base + "\n")
        print(f"Postbox is running at {base}", flush=True)
        print(f"  database:  {'embedded, data in ' + str(state / 'pgdata') if server else 'DATABASE_URL'}")
        print(f"  cells:     {_cells_line(url, count)}   (--cells; remembered in {state / dev_cells.CELLS_FILE})")
        print(f"  migrations applied now: {_applied_line(applied)}")
        print(f"  development key: {key}   (also in {state / 'dev-key'})")
        sqs = dev_sqs_credential(state)
        print(f"  SQS:       {base}/sqs  access key id {sqs['access_key_id']}  secret {sqs['secret_access_key']}"
              f"   (also in {state / 'dev-sqs-credential.json'})")
        print(f"  keys:      {ring or 'from the environment'}   (the server's secret: sealed data, receipt handles)")
        print(f"  serving:   {workers} worker process{'es' if workers > 1 else ''} (--workers)")
        print(f"  requests:  one line each on stderr{' (off: --quiet)' if args.quiet else ' (--quiet silences)'}")
        print(f"  try: curl -s -H 'apikey: {key}' {base}/api/v1/queues", flush=True)
        if workers == 1:
            http_server.serve_forever()
        else:  # the port bound once, served by worker processes (one that dies is started again)
            serve_workers(args.host, args.port, workers)
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        if supervisor is not None:
            supervisor.stop()
        if scheduler is not None:
            scheduler.stop()
        db.close_pool()
        if server is not None:
            server.stop()
        print("Postbox stopped.", flush=True)
    return 0


def _cells_line(first_url: str, count: int) -> str:
    from functions.local import dev_cells

    databases = (_dbname(url) for url in dev_cells.database_urls(first_url, count))
    return ", ".join(f"{dev_cells.name(k)} (database {name})" for k, name in enumerate(databases, start=1))


def _dbname(url: str) -> str:
    import psycopg

    return psycopg.conninfo.conninfo_to_dict(url).get("dbname") or "?"


def _applied_line(applied: dict[str, list[str]]) -> str:
    """What the migrations did, per cell when there are several."""
    if len(applied) == 1:
        (done,) = applied.values()
        return ", ".join(done) or "none (up to date)"
    return "; ".join(f"{cell}: {', '.join(done) or 'none (up to date)'}" for cell, done in applied.items())


def _supervise(server: object) -> object:
    from functions.local.embedded import Supervisor

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return Supervisor(server, say, give_up=lambda: os.kill(os.getpid(), signal.SIGTERM)).start()


def default_workers() -> int:
    """One gateway process per CPU, up to 4: one Python process serves on one core at a time."""
    return max(1, min(os.cpu_count() or 1, 4))


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _connect_admin(state_dir: str) -> None:
    """Reach the cells of the server whose state dir this is (its database migrated, as at its start)."""
    from functions.local import dev_cells
    from functions.local.runtime import database

    state = Path(state_dir).resolve()
    url, _ = database(state)
    dev_cells.use_cells(url, dev_cells.remembered(state))


def _admin(args: argparse.Namespace) -> int:
    from postbox import directory, errors, tenancy

    _connect_admin(args.state_dir)
    try:
        if args.what == "cells":
            out: object = directory.report()
        elif args.what == "tenant-create":
            tenant = tenancy.create_tenant(args.name, plan=args.plan, cell=args.cell)
            out = {"tenant_id": tenant, "name": args.name, "plan": args.plan,
                   "cell": directory.cell_of(tenant).name}
        elif args.what == "key-create":
            with tenancy.on_tenant(args.tenant) as tenant:
                expires = datetime.now(UTC) + timedelta(days=args.days) if args.days else None
                issued = tenancy.create_key(tenant, args.role, project=args.project, name=args.name,
                                            scopes=tuple(args.scope or ()), expires_at=expires)
            out = {"key": issued.key, "key_id": issued.key_id, "role": issued.role}
        elif args.what == "sqs-credentials":
            from postbox.sqs import credentials

            with tenancy.on_tenant(args.tenant) as tenant:
                out = credentials.mint(tenant, args.role, project=args.project, name=args.name,
                                       expires_in_days=args.days)
        elif args.what == "tenant-plan":
            out = tenancy.set_plan(args.tenant, args.plan)
        elif args.what == "tenant-move":
            from postbox import moves

            out = moves.move(args.tenant, args.to, step=lambda phase: print(f"tenant-move: {phase}", file=sys.stderr))
        elif args.what == "project-create":
            with tenancy.on_tenant(args.tenant) as tenant:
                out = {"project_id": tenancy.create_project(tenant, args.name), "tenant": args.tenant,
                       "name": args.name}
        elif args.what == "key-list":
            with tenancy.on_tenant(args.tenant) as tenant:
                out = tenancy.list_keys(tenant)
        elif args.what == "key-revoke":
            from postbox import config

            tenancy.revoke_key(args.key_id)
            seconds = config.settings().key_cache_seconds
            out = {"revoked": args.key_id,
                   "note": f"refused everywhere within {seconds} s: each function caches a resolved key that long"
                           " (POSTBOX_KEY_CACHE_SECONDS)"}
        else:
            out = _flows_admin(args)
    except errors.PostboxError as e:
        print(f"postbox admin: {e.message}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2, default=_plain))
    return 0


def _plain(value: object) -> str:
    """A value JSON has no form for: times in ISO 8601 as the APIs write them, the rest as text."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


# The flows verbs were first named `streams-*`; the old names still work, with a notice.
RENAMED = {"streams-grant": "flows-grant", "streams-revoke": "flows-revoke", "streams-grants": "flows-grants",
           "streams-host": "flows-host"}


def _flows_admin(args: argparse.Namespace) -> object:
    """Flows grants (the streaming-query quota) and hosted flows queries."""
    from functions.agents import flows_runner
    from postbox.flows import quotas

    if args.what in RENAMED:
        print(f"postbox admin: {args.what} is now {RENAMED[args.what]}", file=sys.stderr)
        args.what = RENAMED[args.what]
    if args.what == "flows-grant":
        return quotas.grant(args.tenant, max_queries=args.max_queries, enabled=not args.disabled)
    if args.what == "flows-revoke":
        return quotas.revoke(args.tenant)
    if args.what == "flows-grants":
        return quotas.list_grants()
    return flows_runner.host_for_tenant(args.tenant, args.factory, reset=args.reset)


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
    # An old name takes no `help`: argparse lists only the commands given one.
    cmd = what.add_parser(verb) if hidden else what.add_parser(verb, help=helps[meaning])
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

    dev = sub.add_parser("dev", help="run every route and agent locally on an embedded PostgreSQL",
                         description="Serve every route and run every agent locally, on an embedded PostgreSQL"
                                     " (or DATABASE_URL), with a development key.",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    dev.add_argument("--host", default="127.0.0.1", help="address to listen on")
    dev.add_argument("--port", type=int, default=int(os.environ.get("POSTBOX_PORT", "8080")),
                     help="port to listen on (POSTBOX_PORT)")
    dev.add_argument("--state-dir", default=os.environ.get("POSTBOX_STATE_DIR", ".postbox"),
                     help="where the database and the development key live (POSTBOX_STATE_DIR)")
    dev.add_argument("--long-poll-ms", type=int, default=None,
                     help="the longest a long poll waits, in ms (POSTBOX_LONG_POLL_MS, 20000 when unset)")
    dev.add_argument("--workers", type=int, default=int(os.environ.get("POSTBOX_WORKERS", "0") or 0)
                     or default_workers(),
                     help="gateway worker processes sharing the database, each with its own pool (POSTBOX_WORKERS;"
                          " the number of CPUs up to 4 when unset)")
    dev.add_argument("--front-door", choices=["api-gateway", "function-url"],
                     default=os.environ.get("POSTBOX_FRONT_DOOR") or None,
                     help="act as API Gateway's HTTP API (the default) or as the surfaces' Lambda function URLs"
                          " (their events, CORS preflights and limits; POSTBOX_FRONT_DOOR)")
    dev.add_argument("--quiet", action="store_true",
                     default=os.environ.get("POSTBOX_REQUEST_LOG", "").strip().lower() in ("0", "false", "no", "off"),
                     help="no request log (POSTBOX_REQUEST_LOG=0); otherwise each request prints one line on stderr:"
                          " time, method, path, status, milliseconds, tenant")
    dev.add_argument("--cells", type=int, default=None,
                     help="run this many cells, cell-1 to cell-N, each its own database on the one PostgreSQL"
                          " (the state dir remembers it: when unset, as many as the last start, else 1)")
    dev.set_defaults(run=_dev)

    admin = sub.add_parser("admin", help="manage tenants, projects and API keys (DATABASE_URL or the local database)")
    admin.add_argument("--state-dir", default=os.environ.get("POSTBOX_STATE_DIR", ".postbox"),
                       help="the state dir of the `postbox dev` whose cells to manage (POSTBOX_STATE_DIR)")
    what = admin.add_subparsers(dest="what", required=True, metavar="COMMAND")
    what.add_parser("cells", help="list the cells as JSON: each one's name, schema version and tenants")
    t = what.add_parser("tenant-create", help="create a tenant (with its `default` project)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("name", help="the tenant's unique name (also its account in durable stream URLs)")
    t.add_argument("--plan", default="free", choices=["free", "pro", "unlimited"], help="the tenant's plan")
    t.add_argument("--cell", default=None,
                   help="the cell to place it on (default: the one with the most room; `postbox admin cells`)")
    tp = what.add_parser("tenant-plan", help="put a tenant on another plan, whose limits hold from the next request on")
    tp.add_argument("tenant", help="tenant name or id")
    tp.add_argument("plan", help="the plan's name: free, pro, unlimited, or one added to the plans table")
    tm = what.add_parser("tenant-move", help="move a tenant live to another cell (a second run continues an"
                                             " unfinished move)")
    tm.add_argument("tenant", help="tenant name or id")
    tm.add_argument("--to", required=True, help="the cell's name")
    pc = what.add_parser("project-create", help="create a project in a tenant (names are unique per tenant)")
    pc.add_argument("tenant", help="tenant name")
    pc.add_argument("name", help="the project's name")
    k = what.add_parser("key-create", help="issue an API key (printed once; only its hash is stored)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    k.add_argument("tenant", help="tenant name")
    k.add_argument("--role", default="write", choices=["read", "write", "manage", "anon"],
                   help="what the key may do: read < write < manage; anon = a project's anonymous key")
    k.add_argument("--project", default=None, help="bind the key to this project (created if missing)")
    k.add_argument("--name", default="", help="a label to recognise the key by")
    k.add_argument("--scope", action="append",
                   help="grant one explicit operation (e.g. scaiqueue:publish) beyond the role; repeatable")
    k.add_argument("--days", type=int, default=None, help="expire after this many days (default: never)")
    kl = what.add_parser("key-list", help="list a tenant's keys (prefixes, roles, expiry, revocation)")
    kl.add_argument("tenant", help="tenant name")
    kr = what.add_parser("key-revoke", help="revoke a key (refused everywhere within POSTBOX_KEY_CACHE_SECONDS)")
    kr.add_argument("key_id", help="the key_id that key-create or key-list printed")
    sq = what.add_parser("sqs-credentials", help="mint an SQS credential (access key id and secret, printed once)",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sq.add_argument("tenant", help="tenant name")
    sq.add_argument("--role", default="write", choices=["read", "write", "manage"],
                    help="read: receive-side reads; write: send, receive, delete, visibility; manage: also queues, "
                         "attributes, tags, purge")
    sq.add_argument("--project", default=None, help="bind the credential to this project (created if missing)")
    sq.add_argument("--name", default="", help="a label to recognise the credential by")
    sq.add_argument("--days", type=int, default=None, help="expire after this many days (default: never)")
    for new, old in [(v, k) for k, v in RENAMED.items()]:
        for verb in (new, old):
            _flows_verb(what, verb, new, hidden=verb == old)
    admin.set_defaults(run=_admin)

    mig = sub.add_parser("migrate", help="apply migrations to DATABASE_URL")
    mig.set_defaults(run=_migrate)
    return p


SERVER_COMMANDS = ("dev", "admin", "migrate")
# Written out, not read from the client's parser (whose import would slow every server command);
# a test checks that it names every verb the client's parser has.
CLIENT_EPILOG = ("client commands (they talk to the API; `postbox COMMAND --help`): "
                 "queues, dlq, streams, durable, partitioned, flows, work, tail, login")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in SERVER_COMMANDS and not argv[0].startswith("-"):
        from postbox_client.cli import main as client_main  # the client verbs live with the client

        return client_main(argv)
    logging.basicConfig(level=logging.WARNING)
    # The embedded server's runtime folder falls back to /tmp without it; nothing to tell a user.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
