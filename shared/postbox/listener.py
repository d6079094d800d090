"""The process's one LISTEN connection, so that a waiting request holds no database connection: a
thread LISTENs on the channels its waiters need and wakes them; each waiter's re-check borrows a
pooled connection for its one query.

A channel is listened on, and registered in `waiters` (writers NOTIFY only channels someone waits
on), from its first waiter's arrival until its last waiter has left: a waiter is let go on only
once its channels are listened on, and a channel's last waiter leaves only once the process has
stopped listening on it and taken its registration back (a Lambda environment is frozen between
requests: it must not stay registered, nor leave notifications unread on a LISTENing session). A
registration runs until the latest deadline of the channel's waiters plus REGISTRATION_SLACK_S, so
a steady arrival of waiters renews it every few seconds, not at each one; one that is renewed is
written anew (a new row, the old one deleted), which is all `postbox_listen` may do to `waiters`.

Without a connection (none could be opened, or it broke) waiters are let go at once (after at most
LISTEN_WAIT_S while one is being opened), woken to look when it broke, and re-check on their period;
the thread tries again every RECONNECT_S and, connected again, LISTENs on every channel still
needed and wakes their waiters (what was notified in between is lost, so they look). A connection
idle for IDLE_CLOSE_S is closed.
"""

from __future__ import annotations

import functools
import logging
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import psycopg
from psycopg import sql

from . import cells, db

logger = logging.getLogger("postbox.listener")

LISTEN_WAIT_S = 2.0  # the longest a waiter waits to be listened for (or let go) before it re-checks alone
RECONNECT_S = 2.0  # between two attempts to open the connection
REGISTRATION_SLACK_S = 5.0  # a registration outlasts its channel's latest deadline by this much
IDLE_CLOSE_S = 60.0  # a connection no waiter needed for this long is closed


class Waiter:
    """One waiting request's hold on its channels."""

    __slots__ = ("channels", "deadline", "_woken")

    def __init__(self, channels: list[str], deadline: float) -> None:
        self.channels = channels
        self.deadline = deadline  # time.monotonic()
        self._woken = threading.Event()  # a notification on one of its channels (or a reason to look)

    def sleep(self, timeout_s: float) -> bool:
        """Until a notification on one of the channels or `timeout_s`; whether one came."""
        woken = self._woken.wait(max(0.0, timeout_s))
        self._woken.clear()
        return woken


class Listener:
    """The LISTEN connection of this process and the thread that serves it (see the module)."""

    def __init__(self, connect: Callable[[], psycopg.Connection]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = {}  # channel -> the waiters on it
        self._listened: dict[str, tuple[float, uuid.UUID]] = {}  # channel -> (registered until, its row)
        self._settling: list[threading.Event] = []  # set once the thread did what an arrival or a leave needs
        self._conn: psycopg.Connection | None = None
        self._down_until = 0.0  # no connection to be had before then: waiters re-check alone
        self._unheard = False  # waiters went unlistened for (no connection): they look once it is back
        self._idle_since = time.monotonic()
        self._stopped = False
        self._wake_r, self._wake_w = socket.socketpair()  # a poke ends the thread's select()
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="postbox-listener", daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    # ---- what a waiting request calls ----

    @contextmanager
    def waiting(self, channels: list[str], deadline: float) -> Iterator[Waiter]:
        """Hold `channels` until the block ends: the waiter is woken by a NOTIFY on any of them."""
        waiter = Waiter(list(dict.fromkeys(channels)), deadline)
        if waiter.channels:
            self._arrive(waiter)
        try:
            yield waiter
        finally:
            if waiter.channels:
                self._leave(waiter)

    def _arrive(self, waiter: Waiter) -> None:
        with self._lock:
            for name in waiter.channels:
                self._waiters.setdefault(name, set()).add(waiter)
            covered = all(self._listened.get(name, (0.0,))[0] >= waiter.deadline + 1 for name in waiter.channels)
            if (covered and self._conn is not None) or time.monotonic() < self._down_until or self._stopped:
                return  # listened on and registered long enough already, or no connection to be had
            settled = threading.Event()
            self._settling.append(settled)
        self._poke()
        settled.wait(LISTEN_WAIT_S)

    def _leave(self, waiter: Waiter) -> None:
        last = False
        with self._lock:
            for name in waiter.channels:
                held = self._waiters.get(name)
                if held is not None:
                    held.discard(waiter)
                    if not held:
                        del self._waiters[name]
                        last = last or name in self._listened
            if not last or self._stopped:
                return
            settled = threading.Event()
            self._settling.append(settled)
        self._poke()
        settled.wait(LISTEN_WAIT_S)

    def stop(self) -> None:
        """Close the connection and end the thread; waiters still holding channels re-check alone."""
        self._stopped = True
        self._poke()
        self._thread.join(LISTEN_WAIT_S + db.LISTEN_CONNECT_TIMEOUT_S)

    def _poke(self) -> None:
        with suppress(OSError):  # poked enough already (its buffer is full), or stopped
            self._wake_w.send(b"x")

    # ---- the thread ----

    def _run(self) -> None:
        try:
            while not self._stopped:
                try:
                    self._sync()
                    self._wait()
                except (psycopg.Error, OSError):
                    self._lost()
                except Exception:  # a fault of ours: logged, and the waiters re-check while it starts over
                    logger.exception("the LISTEN connection's thread failed; starting over")
                    self._lost()
        finally:
            self._close()
            self._wake_everyone()
            with self._lock:
                self._settle(self._settling)
            self._wake_r.close()
            self._wake_w.close()

    def _sync(self) -> None:
        """LISTEN and register what waiters need, stop what none needs, then settle the arrivals and
        leaves this covered (whatever happens: a waiter let go without a connection re-checks alone)."""
        now = time.monotonic()
        with self._lock:
            wanted = {name: max(w.deadline for w in held) for name, held in self._waiters.items()}
            settling, self._settling = self._settling, []
            gone = {name: self._listened.pop(name)[1] for name in list(self._listened) if name not in wanted}
        try:
            if wanted:
                self._idle_since = now
            if self._conn is None and (not wanted or now < self._down_until or not self._open()):
                return
            self._register(wanted, now)
            self._unregister(gone)
        finally:
            self._settle(settling)

    def _open(self) -> bool:
        """Connect (LISTEN again on whatever is needed follows in `_register`); False: none to be had."""
        try:
            conn = self._connect()
        except psycopg.Error:
            self._down_until = time.monotonic() + RECONNECT_S
            self._unheard = True
            return False
        conn.add_notify_handler(lambda note: self._deliver(note.channel))  # those that come with a result
        with self._lock:
            self._conn = conn
            self._listened.clear()
        if self._unheard:  # whatever was notified while there was no connection: look now
            self._unheard = False
            self._wake_everyone()
        return True

    def _register(self, wanted: dict[str, float], now: float) -> None:
        with self._lock:
            listened = dict(self._listened)
        new = [name for name in wanted if name not in listened]
        renew = [name for name, deadline in wanted.items() if listened.get(name, (0.0,))[0] < deadline + 1]
        if not renew:
            return
        conn = self._conn
        if new:  # listening before registering: a registered channel's NOTIFY is never missed
            conn.execute(sql.SQL("; ").join(sql.SQL("LISTEN {}").format(sql.Identifier(n)) for n in new))
        rows = {name: uuid.uuid4() for name in renew}
        seconds = [wanted[name] - now + REGISTRATION_SLACK_S for name in renew]
        conn.execute(
            "INSERT INTO waiters (channel, waiter, until) SELECT c, w, clock_timestamp() + s * interval '1 second'"
            " FROM unnest(%s::text[], %s::uuid[], %s::float8[]) AS r(c, w, s)",
            (renew, [rows[name] for name in renew], seconds),
        )
        superseded = [(name, listened[name][1]) for name in renew if name in listened]
        with self._lock:
            for name, s in zip(renew, seconds, strict=True):
                self._listened[name] = (now + s, rows[name])
        if superseded:
            self._delete(superseded)

    def _unregister(self, gone: dict[str, uuid.UUID]) -> None:
        if not gone:
            return
        self._conn.execute(sql.SQL("; ").join(sql.SQL("UNLISTEN {}").format(sql.Identifier(n)) for n in gone))
        self._delete(list(gone.items()))

    def _delete(self, rows: list[tuple[str, uuid.UUID]]) -> None:
        self._conn.execute("DELETE FROM waiters WHERE channel = ANY(%s) AND waiter = ANY(%s)",
                           ([c for c, _ in rows], [w for _, w in rows]))

    def _wait(self) -> None:
        """Until a notification, a poke, or it is time to reconnect or to close an idle connection."""
        conn = self._conn
        with self._lock:
            needed = bool(self._waiters)
        watch = select.poll()  # not select(): a process serving many connections has descriptors past 1023
        watch.register(self._wake_r, select.POLLIN)
        if conn is None:
            timeout = max(0.0, self._down_until - time.monotonic()) if needed else None
        else:
            self._take_notifications(conn)  # any read in with a statement's result, before sleeping on the socket
            timeout = None if needed else max(0.0, self._idle_since + IDLE_CLOSE_S - time.monotonic())
            watch.register(conn.fileno(), select.POLLIN)
        ready = {fd for fd, _ in watch.poll(None if timeout is None else timeout * 1000)}
        if conn is not None:
            if conn.fileno() in ready:
                self._take_notifications(conn)
            elif not ready and not needed:
                self._close()
        if self._wake_r.fileno() in ready:
            self._wake_r.recv(4096)

    def _take_notifications(self, conn: psycopg.Connection) -> None:
        conn.pgconn.consume_input()  # reads what the socket holds, without blocking; OperationalError once it is gone
        while (note := conn.pgconn.notifies()) is not None:
            self._deliver(note.relname.decode())

    def _deliver(self, channel: str) -> None:
        with self._lock:
            for waiter in self._waiters.get(channel, ()):
                waiter._woken.set()

    def _lost(self) -> None:
        """The connection broke: every waiter looks now and re-checks on its period until it is back."""
        self._close()
        self._down_until = time.monotonic() + RECONNECT_S
        self._unheard = True
        self._wake_everyone()

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            self._listened.clear()
        if conn is not None:
            with suppress(psycopg.Error):
                conn.close()

    def _wake_everyone(self) -> None:
        with self._lock:
            for held in self._waiters.values():
                for waiter in held:
                    waiter._woken.set()

    @staticmethod
    def _settle(settling: list[threading.Event]) -> None:
        for settled in settling:
            settled.set()


_listeners: dict[str, Listener] = {}  # by cell: a waiter listens on its tenant's cell
_create = threading.Lock()


def current() -> Listener:
    """This process's listener on the current cell, started at first use (and again after `stop`)."""
    cell = cells.current()
    found = _listeners.get(cell.name)
    if found is None:
        with _create:
            found = _listeners.get(cell.name)
            if found is None:
                found = _listeners[cell.name] = Listener(functools.partial(_connect_to, cell))
    return found


def _connect_to(cell: cells.Cell) -> psycopg.Connection:
    """The listener's thread connects to its own cell, whatever cell the thread's context names."""
    with cells.use(cell):
        return db.listen_connect()


def stop() -> None:
    """Stop this process's listeners (the pools are being closed: the next wait starts new ones)."""
    with _create:
        found = list(_listeners.values())
        _listeners.clear()
    for listener in found:
        listener.stop()


db.on_close(stop)
