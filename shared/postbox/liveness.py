"""A client-side bound on waiting for a database that stopped answering.

PostgreSQL bounds what it runs (statement_timeout, lock_timeout), but nothing bounds waiting for a
server that answers nothing at all: a stopped or frozen host, a network partition that swallows
packets. A statement sent then waits for good: TCP keepalives and tcp_user_timeout notice only
after tens of seconds, and never when the host's kernel still acknowledges (a stopped process) nor
on a Unix socket (`postbox dev`'s embedded server).

So the pool's connections report every wait for an answer that their caller did not bound (a
statement, a commit; a LISTEN's wait has its own timeout) to the process's `Watch`. When one has
waited SUSPECT_S, the watch asks the server for `SELECT 1` on a new connection of its own. Any
answer (a refusal or an error too: a server that says no is not hanging, and connections to it
fail by themselves) means the statement is just slow: it goes on, and the server is asked again
every SUSPECT_S while it lasts, so a long statement is never cut. Silence (no connection within
CONNECT_S, or no answer to the query within ANSWER_S) means the server is not answering: every
connection of the process is shut down under its users, whose waits fail at once as a lost
connection (the request's 503 with Retry-After), and the pool connects anew, bounded by its
connect_timeout. A request that meets a database that stopped answering is refused within
SUSPECT_S + CONNECT_S + a tick (2.6 s); one on a proxy whose database stopped, within 1.6 s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable

import psycopg

SUSPECT_S = 0.5  # a wait this long makes the watch ask the server whether it is there
CONNECT_S = 2  # how long the server has to take the ping's connection (psycopg's shortest connect_timeout)
ANSWER_S = 1.0  # and then to answer its SELECT 1
TICK_S = 0.1

logger = logging.getLogger("postbox.liveness")


class Watch:
    """The waits of one process's connections, and the thread that watches them."""

    def __init__(self, connect: Callable[[], psycopg.Connection], on_lost: Callable[[], None]) -> None:
        """`connect`: a new plain connection to the server, with connect_timeout CONNECT_S; `on_lost`:
        called when the server did not answer and its connections were shut down."""
        self.connect, self.on_lost = connect, on_lost
        self.waits: dict[psycopg.Connection, float] = {}  # connection -> when its wait began (monotonic)
        self._connections: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._answered_at = 0.0  # when the last ping the server answered was sent
        self._thread: threading.Thread | None = None

    def adopt(self, conn: psycopg.Connection) -> None:
        """Watch `conn` (its waits are reported by the connection itself); starts the thread."""
        with self._lock:
            self._connections.add(conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="postbox-db-watch", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(TICK_S)
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watch must outlive anything one check meets
                logger.exception("the database watch failed a check")

    def check(self) -> None:
        """Ping the server if a wait has gone on SUSPECT_S since it last answered; when it does not
        answer, shut every connection down."""
        waits = self.waits.copy()
        now = time.monotonic()
        if not waits or now - min(waits.values()) < SUSPECT_S or now - self._answered_at < SUSPECT_S:
            return
        sent = time.monotonic()
        if answers(self.connect):
            self._answered_at = sent
            return
        with self._lock:
            connections = list(self._connections)
        logger.warning("the database did not answer while a statement waited %.1f s: closing its %d connections",
                       time.monotonic() - min(waits.values()), len(connections))
        for conn in connections:
            shut_down(conn)
        self.on_lost()


def answers(connect: Callable[[], psycopg.Connection]) -> bool:
    """Whether the server says anything to a new connection and its `SELECT 1` (see above): False
    only for silence."""
    try:
        conn = connect()
    except psycopg.errors.ConnectionTimeout:
        return False
    except psycopg.Error:
        return True
    deadline = time.monotonic() + ANSWER_S
    try:
        pg = conn.pgconn
        pg.send_query(b"SELECT 1")
        while pg.is_busy():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([pg.socket], [], [], remaining)[0]:
                return False
            pg.consume_input()
        return True
    except psycopg.Error:
        return True
    finally:
        shut_down(conn)
        conn.close()


def shut_down(conn: psycopg.Connection) -> None:
    """Shut the connection's socket down in both directions: whoever waits on it wakes up to a
    closed connection (psycopg's OperationalError), and nothing more is sent on it."""
    with contextlib.suppress(Exception):
        duplicate = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()
