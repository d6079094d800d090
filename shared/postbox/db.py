"""The connection pools: one per cell, created lazily at first use, reused across Lambda invocations.

`prepare_threshold=None` because RDS Proxy pins a session that prepares statements; no session
`SET`s for the same reason. Each unit of work takes one connection and one transaction, on the
cell it runs on (`postbox.cells.current()`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from . import aws, cells, config, errors, jsoncodec, liveness

T = TypeVar("T")
logger = logging.getLogger("postbox.db")

_lock = threading.Lock()


SECRET_TTL_S = 60.0  # a rotated DB password reaches new connections within a minute
TOKEN_TTL_S = 600.0  # an IAM authentication token is valid for 15 minutes; new connections get a fresh one
_secret_cache: dict[tuple[str, ...], tuple[float, str]] = {}  # the IAM logins' conninfo, by host and user
# (the Secrets Manager client, Powertools' provider over it) by the cell's region and endpoint
_secrets: dict[tuple[str | None, str | None], tuple[Any, Any]] = {}


def conninfo(cell: cells.Cell | None = None) -> str:
    """Where the cell's database is (the current cell's by default): its URL when set (local,
    tests; DATABASE_URL for the one cell); otherwise its proxy endpoint, logged in either with an
    IAM token as POSTBOX_DB_USER (POSTBOX_DB_IAM_AUTH: the functions, which hold no password) or with
    the user and password of its secret (POSTBOX_DB_SECRET_ARN: the migrate function).

    The pool calls this for every new connection; the secret is re-read at most every SECRET_TTL_S
    (Powertools' cache), so a rotated password is picked up without a cold start.
    """
    cell = cell or cells.current()
    s = config.settings()
    if cell.database_url:
        return cell.database_url
    if cell.db_host and s.db_iam_auth and s.db_user:
        return _iam_conninfo(cell.db_host, s.db_user, cell)
    if not (cell.db_host and cell.db_secret_arn):
        raise RuntimeError(f"cell {cell.name}: set DATABASE_URL, or POSTBOX_DB_HOST and POSTBOX_DB_SECRET_ARN")
    secret = _read_secret(cell.db_secret_arn, cell)
    return _make(cell.db_host, secret["username"], secret["password"])


def _make(host: str, user: str, password: str) -> str:
    s = config.settings()
    return psycopg.conninfo.make_conninfo(
        host=host,
        port=s.db_port,
        dbname=s.db_name,
        user=user,
        password=password,
        sslmode=s.db_sslmode,
        application_name="postbox",
        connect_timeout=CONNECTION_KWARGS["connect_timeout"],  # for the migrate function's own connection too
    )


def _iam_conninfo(host: str, user: str, cell: cells.Cell) -> str:
    """A login with an IAM token, signed for the cell's region (a token signed for another is refused)."""
    now = time.monotonic()
    cached = _secret_cache.get(("iam", host, user))
    if cached and cached[0] > now:
        return cached[1]
    s = config.settings()
    info = _make(host, user, _iam_token(host, s.db_port, user, cell.region or s.region))
    _secret_cache[("iam", host, user)] = (now + TOKEN_TTL_S, info)
    return info


def _iam_token(host: str, port: int, user: str, region: str | None) -> str:
    return aws.client("rds", region=region).generate_db_auth_token(  # boto3 loads here: only on AWS
        DBHostname=host, Port=port, DBUsername=user, Region=region
    )


def _read_secret(arn: str, cell: cells.Cell) -> dict:
    """The secret's JSON, cached for SECRET_TTL_S by Powertools' parameters (imported here: only
    cold starts on AWS pay for it), over the Secrets Manager client of `postbox.aws` in the cell's
    region (its secrets live there), through the cell's `secrets_endpoint` when it has one."""
    client = aws.client("secretsmanager", region=cell.region, endpoint_url=cell.secrets_endpoint)
    where = (cell.region, cell.secrets_endpoint)
    made = _secrets.get(where)
    if made is None or made[0] is not client:  # a new client (tests reset them): a new cache
        from aws_lambda_powertools.utilities.parameters import SecretsProvider

        made = _secrets[where] = (client, SecretsProvider(boto3_client=client))
    return made[1].get(arn, transform="json", max_age=SECRET_TTL_S)


def forget_credentials() -> None:
    """Forget the cached secret and IAM tokens: the next connection reads them afresh (an environment
    restored from a SnapStart snapshot must not use the ones its snapshot held)."""
    _secrets.clear()
    _secret_cache.clear()


class _Database:
    """One cell's connections in this process: its pool (opened at first use), when one of them
    last failed, and the watch on their waits."""

    def __init__(self, cell: cells.Cell) -> None:
        self.cell = cell
        self.pool: ConnectionPool | None = None
        self.failed_at = 0.0  # when a connection last failed (monotonic): connections older than that are pinged
        self.watch = liveness.Watch(self.ping_connection, self.mark_failed)

    def open_pool(self) -> ConnectionPool:
        if self.pool is None:
            with _lock:
                if self.pool is None:
                    s = config.settings()
                    cell = self.cell
                    self.pool = ConnectionPool(
                        lambda: conninfo(cell),
                        connection_class=PooledConnection,
                        min_size=s.pool_min,
                        max_size=max(s.pool_max, 1),
                        kwargs=_connection_kwargs(cell),
                        configure=self.configure,
                        check=self.check_if_idle,
                        reset=_reset,
                        name=f"postbox-{cell.name}",
                        timeout=s.pool_timeout_s,
                        reconnect_timeout=RECONNECT_TIMEOUT_S,
                        open=True,
                    )
        return self.pool

    def mark_failed(self) -> None:
        self.failed_at = time.monotonic()

    def ping_connection(self) -> psycopg.Connection:
        return psycopg.connect(conninfo(self.cell), **{**CONNECTION_KWARGS, "connect_timeout": liveness.CONNECT_S})

    def configure(self, conn: psycopg.Connection) -> None:
        jsoncodec.use_on(conn)
        self.adopt(conn)

    def adopt(self, conn: psycopg.Connection) -> None:
        """Watch the connection's waits: a server that stops answering breaks it."""
        conn.watch = self.watch  # type: ignore[attr-defined]
        self.watch.adopt(conn)

    def check_if_idle(self, conn: psycopg.Connection) -> None:
        """Ping only connections that sat idle, or that were last used before a connection failed
        (the server may have gone and come back since): a busy function pays no extra round trip."""
        last_used = _last_used.get(conn, 0.0)
        if time.monotonic() - last_used > CHECK_AFTER_IDLE_S or last_used <= self.failed_at:
            ConnectionPool.check_connection(conn)


_databases: dict[str, _Database] = {}


def _here(cell: cells.Cell | None = None) -> _Database:
    """The current cell's connections (made at first use; a cell whose settings changed, anew)."""
    cell = cell or cells.current()
    found = _databases.get(cell.name)
    if found is None or found.cell != cell:
        with _lock:
            found = _databases.get(cell.name)
            if found is None or found.cell != cell:
                found = _databases[cell.name] = _Database(cell)
    return found


def pool() -> ConnectionPool:
    """The current cell's pool."""
    return _here().open_pool()


# ---- when the database goes away ------------------------------------------------------------------
# A request that gets no connection within POSTBOX_POOL_TIMEOUT_S (the server is down, failing over,
# or every connection is busy), or whose connection breaks under it, is the domain's Unavailable:
# each surface answers it 503 with Retry-After in its own envelope. The pool heals by itself: a
# broken connection is discarded when it comes back, every connection older than the last failure
# is pinged before it is handed out again, and a reconnection attempt gives up after
# RECONNECT_TIMEOUT_S (psycopg_pool's backoff would otherwise grow its delay to minutes), so the
# next request starts a new one: the pool serves again within seconds of the server's return.

RETRY_AFTER_S = 2
RECONNECT_TIMEOUT_S = 10.0
# What bounds each connection, for AWS and `postbox dev` alike (docs/architecture.md says why each):
# - connect_timeout: a server that takes no connection (stopped, unreachable) fails an attempt in
#   5 s; a request waits for a connection POSTBOX_POOL_TIMEOUT_S (3 s) at most anyway;
# - TCP keepalives and tcp_user_timeout: a server that vanished without closing its sockets (a
#   failover, a partition) is noticed by the kernel within ~30 s, even by a connection that waits
#   for nothing of ours; socket options, not session SETs;
# - `liveness`: a server that stops answering fails every wait within about 2.6 s;
# - SESSION_SETTINGS: what the server itself bounds.
CONNECTION_KWARGS: dict[str, Any] = {
    "prepare_threshold": None,
    "autocommit": True,
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}
# What the server bounds in every session of the functions. statement_timeout ends a statement
# that no one can still be waiting for: no function waits that long (API 29 s, agents 60 s by
# default; long polls wait on LISTEN, not in a statement; agents' sweeps are batches of short
# statements). lock_timeout answers a request stuck behind a lock (503) before the API's 30 s cut
# does (504). idle_in_transaction_session_timeout releases the locks of a transaction whose client
# vanished (no code keeps one open across anything slow). On AWS the roles carry them as defaults
# (a schema migration): RDS Proxy refuses startup options and pins a session that SETs them. With
# DATABASE_URL they go in the connection's startup options, unless the URL names `options` itself
# (give it `options=` for a pooler that refuses them).
SESSION_SETTINGS = {"statement_timeout": "5min", "lock_timeout": "20s", "idle_in_transaction_session_timeout": "1min"}


def _connection_kwargs(cell: cells.Cell | None = None) -> dict[str, Any]:
    url = (cell or cells.current()).database_url
    if not url or "options" in psycopg.conninfo.conninfo_to_dict(url):
        return CONNECTION_KWARGS
    return {**CONNECTION_KWARGS, "options": " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())}


# SQLSTATEs that mean the server went away or will not take the connection, not that a statement failed.
_GONE_SQLSTATES = {"57P01", "57P02", "57P03", "53300"}  # admin/crash shutdown, starting up, too many clients


def _lost(error: psycopg.OperationalError) -> bool:
    """The connection broke or could not be had (no SQLSTATE, class 08, a shutdown), rather than a
    statement failing on a live one (a cancel, a statement timeout: those stay what they are)."""
    state = error.sqlstate
    return state is None or state.startswith("08") or state in _GONE_SQLSTATES


def _mark_failed() -> None:
    _here().mark_failed()


def unavailable(reason: str) -> errors.Unavailable:
    _mark_failed()
    return errors.Unavailable(f"The database is unavailable ({reason}); retry shortly.",
                              retry_after=RETRY_AFTER_S)


@contextmanager
def _available() -> Iterator[None]:
    """Around one use of a pooled connection: no connection in time, or one lost, is Unavailable;
    so is a transaction the database broke off that was not (or no longer) run again, or one that
    waited for a lock longer than lock_timeout."""
    try:
        yield
    except PoolTimeout:
        raise unavailable(f"no connection within {config.settings().pool_timeout_s:g} s") from None
    except psycopg.IntegrityError as e:
        if e.sqlstate in RETRY_SQLSTATES:
            raise busy(e) from None
        raise
    except psycopg.OperationalError as e:
        if e.sqlstate in RETRY_SQLSTATES or e.sqlstate == LOCK_TIMEOUT:
            raise busy(e) from None
        if not _lost(e):
            raise
        raise unavailable("connection lost") from None
    except psycopg.DatabaseError as e:
        if e.sqlstate != FENCED:
            raise
        raise fenced(e) from None


# ---- a tenant being moved to another cell ----------------------------------------------------------
# While a tenant moves (`postbox.moves`), triggers on its source cell refuse its writes with FENCED,
# from the final copy until its rows there are drained. Its requests answer 503 with Retry-After, and
# its cached cell is forgotten: the retry asks the directory, which names the new cell once flipped.
FENCED = "PB503"


def fenced(error: psycopg.Error) -> errors.Unavailable:
    diag = error.diag
    found = errors.from_sqlstate(FENCED, diag.message_primary or "", diag.message_detail, diag.message_hint)
    assert isinstance(found, errors.Unavailable)
    tenant = found.details.pop("moving_tenant", None)
    if tenant:
        for forget in _on_fenced:
            forget(str(tenant))
    return found


_on_fenced: list[Callable[[str], None]] = []


def on_fenced(forget: Callable[[str], None]) -> None:
    """Have `fenced` also call `forget(tenant_id)` (the directory drops the tenant's cached cell)."""
    _on_fenced.append(forget)


# ---- when the database breaks a transaction off ---------------------------------------------------
# PostgreSQL ends a deadlock by failing one transaction in it (40P01), and a repeatable-read or
# serializable transaction it cannot order with a concurrent one by failing it (40001). What failed
# was rolled back whole, so the same work run again is safe and nearly always succeeds. It is run
# again only where the whole unit of work is the transaction that failed: a statement outside any
# transaction block (autocommit: its own transaction; `PooledConnection`), or the block `transact`
# opens the transaction for. Never a block inside a caller's transaction (the caller's earlier work
# went with it), nor anything after a commit. Up to RETRY_ATTEMPTS runs, waiting a random time below
# RETRY_BACKOFF_S, doubled each time, between them (so the transactions that met do not meet again
# in step); then the request is Unavailable (503 with Retry-After), never a 500.
# A foreign key violation is met the same way: our code writes a row referring to another only after
# resolving that one, so the violation means a concurrent request deleted it in between (a queue
# deleted under a push or a pop); run again, the work resolves it anew (made again, or not found).

RETRY_SQLSTATES = frozenset({"40P01", "40001", "23503"})  # deadlock, serialization failure, foreign key
LOCK_TIMEOUT = "55P03"  # lock_not_available: a lock waited for longer than lock_timeout
RETRY_ATTEMPTS = 4
RETRY_BACKOFF_S = 0.01


def _retried(error: psycopg.Error, attempt: int) -> bool:
    """Whether to run again after `error` on run `attempt` (after a jittered pause)."""
    if error.sqlstate not in RETRY_SQLSTATES or attempt >= RETRY_ATTEMPTS:
        return False
    logger.warning("the database broke a transaction off (%s, run %d of %d); running it again",
                   error.sqlstate, attempt, RETRY_ATTEMPTS)
    time.sleep(random.uniform(0, RETRY_BACKOFF_S * 2 ** (attempt - 1)))
    return True


_BUSY = {"40P01": "a deadlock with concurrent requests", "40001": "a conflict with concurrent requests",
         "23503": "what it refers to was deleted by a concurrent request",
         LOCK_TIMEOUT: "a lock held longer than its lock_timeout"}


def busy(error: psycopg.Error) -> errors.Unavailable:
    """The 503 of a request the database broke off, or that waited too long for a lock."""
    return errors.Unavailable(f"The database broke this request off ({_BUSY[error.sqlstate]}); retry shortly.",
                              retry_after=1)


class PooledConnection(psycopg.Connection):
    """The pool's connections. A statement run outside a transaction block is its own transaction,
    so one the database broke off is run again (see above); inside a block it fails as usual. Every
    wait for the server that its caller did not bound is reported to the liveness watch."""

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                binary: bool = False) -> psycopg.Cursor:
        attempt = 1
        while True:
            alone = self.autocommit and self.pgconn.transaction_status == TransactionStatus.IDLE
            try:
                return super().execute(query, params, prepare=prepare, binary=binary)
            except psycopg.Error as e:
                if not (alone and _retried(e, attempt)):
                    raise
            attempt += 1

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        watch = getattr(self, "watch", None)
        if watch is None or kwargs.get("timeout") is not None:  # bounded by its caller (a LISTEN's wait)
            return super().wait(gen, *args, **kwargs)
        waits = watch.waits
        waits[self] = time.monotonic()
        try:
            return super().wait(gen, *args, **kwargs)
        finally:
            waits.pop(self, None)


def _ping_connection() -> psycopg.Connection:
    return _here().ping_connection()


def transact(work: Callable[[psycopg.Connection], T], conn: psycopg.Connection | None = None) -> T:
    """`work(conn)` in one transaction, committed when it returns, on `conn` or a pooled connection;
    run again from the start, in a new transaction, when the database broke it off. On a `conn`
    already in a transaction, `work` runs once, in a savepoint: the caller's transaction is the unit.
    `work` must do nothing outside the database it would not do twice."""
    if conn is None:
        with connection() as pooled:
            return transact(work, pooled)
    if conn.pgconn.transaction_status != TransactionStatus.IDLE:
        with conn.transaction():
            return work(conn)
    attempt = 1
    while True:
        try:
            with conn.transaction():
                return work(conn)
        except psycopg.Error as e:
            if not _retried(e, attempt):
                raise
        attempt += 1


CHECK_AFTER_IDLE_S = 5.0  # a connection idle longer than this is pinged before it is handed out
_last_used: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()


def _reset(conn: psycopg.Connection) -> None:
    """Back in the pool: autocommit again (whatever the borrower did), and remember when."""
    conn.autocommit = True
    _last_used[conn] = time.monotonic()


_closers: list[Callable[[], None]] = []


def on_close(closer: Callable[[], None]) -> None:
    """Have `close_pool` also call `closer` (the listener drops its connection with the pool's)."""
    _closers.append(closer)


def close_pool() -> None:
    """Close every connection of this process, on every cell (the environment may name other
    databases next)."""
    with _lock:
        for database in _databases.values():
            if database.pool is not None:
                database.pool.close()
        _databases.clear()
    for closer in _closers:
        closer()


# ---- the LISTEN connection ------------------------------------------------------------------------
# A process LISTENs on one connection of its own, outside the pool, held by its listener
# (`postbox.listener`), so a waiting request holds no pooled connection. RDS Proxy pins a session
# that LISTENs for as long as the client keeps it, so on AWS that connection goes straight to the
# cluster (POSTBOX_DB_LISTEN_HOST, as the `postbox_listen` role, which may only register waiters).
# Everything else still goes through the proxy.

LISTEN_CONNECT_TIMEOUT_S = 5


def listen_connect() -> psycopg.Connection:
    """A new connection to LISTEN on (OperationalError when none can be opened): to the cluster as
    POSTBOX_DB_LISTEN_USER when POSTBOX_DB_LISTEN_HOST is set, else where the pool connects."""
    s = config.settings()
    cell = cells.current()
    info = _iam_conninfo(cell.listen_host, s.listen_user or "postbox_listen", cell) if cell.listen_host else conninfo()
    conn = PooledConnection.connect(info, **{**_connection_kwargs(), "connect_timeout": LISTEN_CONNECT_TIMEOUT_S})
    _here().adopt(conn)  # a server that stops answering breaks it too: the listener connects anew
    return conn


@contextmanager
def transaction() -> Iterator[psycopg.Connection]:
    """One connection, one transaction: committed on success, rolled back on any error (none to be
    had within POSTBOX_POOL_TIMEOUT_S, or one lost under the work: Unavailable). A block is not run
    again when the database breaks it off: a unit of work that writes goes through `transact`."""
    with _available(), pool().connection() as conn, conn.transaction():
        yield conn


@contextmanager
def connection() -> Iterator[psycopg.Connection]:
    """One connection in autocommit mode: each statement is its own transaction (one round trip),
    run again if the database breaks it off."""
    with _available(), pool().connection() as conn:
        yield conn


@contextmanager
def domain_errors() -> Iterator[None]:
    """Turn the PB-class SQLSTATEs our SQL functions raise into the domain's typed errors."""
    try:
        yield
    except psycopg.Error as e:
        diag = e.diag
        if e.sqlstate == FENCED:
            raise fenced(e) from None
        error = errors.from_sqlstate(e.sqlstate, diag.message_primary or "", diag.message_detail, diag.message_hint)
        if error is None:
            raise
        raise error from None
