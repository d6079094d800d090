"""Finding a stream by name, after its lifetime is applied, and the checks every verb makes on
what it found (deleted, another incarnation)."""

from __future__ import annotations

import psycopg

from postbox import db
from postbox.errors import Gone, NotFound, PreconditionFailed

from . import store
from .model import Scope
from .store import Stream


def alive(conn: psycopg.Connection, stream: Stream | None) -> Stream | None:
    """The stream after its lifetime is applied: an expired stream is removed, or soft-deleted while
    forks still read through it."""
    if stream is None or not stream.expired or stream.deleted:
        return stream
    if stream.forks > 0:
        store.soft_delete(conn, stream.id)
        return store.by_id(conn, stream.id)
    store.delete(conn, stream)
    return None


def get(conn: psycopg.Connection, scope: Scope, name: str, *, lock: bool = False) -> Stream:
    """The live stream `name` (404 when missing or expired, 410 when deleted)."""
    stream = alive(conn, store.find(conn, scope.project_id, name, lock=lock))
    if stream is None:
        raise NotFound("Stream not found.", code="STREAM_NOT_FOUND")
    if stream.deleted:
        raise Gone("The stream was deleted.", code="STREAM_GONE", incarnation=stream.incarnation)
    return stream


def head(scope: Scope, name: str) -> Stream:
    with db.transaction() as conn:
        return get(conn, scope, name)


def check_incarnation(stream: Stream, incarnation: str | None) -> None:
    """A request that names an incarnation (`Stream-Incarnation`) applies only to that one."""
    if incarnation is not None and incarnation != stream.incarnation:
        raise PreconditionFailed("The stream is not the one that answered this Stream-Incarnation.",
                                 code="INCARNATION_MISMATCH", incarnation=stream.incarnation)
