"""Message schemas: JSON Schema (draft 2020-12) documents registered per scope by name and version.

A queue may name one schema; its publishes must carry bodies that satisfy it. Validation runs
here, before the publish's one SQL call, against the schema this process believes the queue
names; the publish function checks that belief (SCAIQUEUE_SCHEMA_STALE when the queue names
another now) and `messages.publish` then loads the right one and tries again. A schema is never
changed once registered (only deprecated), so compiled validators are kept by id for good.
Remote `$ref`s are never fetched.

jsonschema and referencing (about a tenth of the work function's cold import) are imported by the
first call that checks or compiles a schema, which most requests (every publish to a queue without
a schema) never make.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import psycopg

from .. import db
from ..errors import Conflict, NotFound, Unprocessable
from ..tenancy import Principal, require
from . import acl, audit
from .common import MANAGE, QUEUE_NOT_FOUND, SCOPE_NOT_FOUND, SLUG_CONFLICT, VIEW, as_json, parse_id

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

SCHEMA_NOT_FOUND = "SCAIQUEUE_SCHEMA_NOT_FOUND"
MAX_ERRORS = 20

_DOC = """jsonb_build_object('id', x.id, 'scope_id', x.scope_id, 'name', x.name, 'version', x.version,
    'schema', x.schema, 'deprecated', x.deprecated, 'created_at', x.created_at, 'updated_at', x.updated_at)"""

_validators: dict[str, Draft202012Validator] = {}
_queue_schema: dict[str, str | None] = {}  # queue id -> schema id, as last seen (checked by every publish)
_lock = threading.Lock()


def _missing() -> NotFound:
    return NotFound("Schema not found.", code=SCHEMA_NOT_FOUND)


def _path(prefix: str, parts: Any) -> str:
    """A validator path dotted under `prefix` (`body.items.0.qty`); `$` for the document itself."""
    return ".".join([prefix] * bool(prefix) + [str(p) for p in parts]) or "$"


def errors_of(validator: Draft202012Validator, payload: Any, prefix: str = "") -> list[dict[str, str]]:
    """The validator's complaints as [{field, message}], by path, at most MAX_ERRORS. A schema stored
    before references were checked may still hold one it cannot resolve: that is its fault, said so."""
    from referencing.exceptions import Unresolvable

    try:
        found = sorted(validator.iter_errors(payload), key=lambda e: [str(p) for p in e.absolute_path])
    except Unresolvable as e:
        return [{"field": prefix or "$", "message": f"the schema cannot resolve a reference: {e}"[:300]}]
    return [{"field": _path(prefix, e.absolute_path), "message": e.message} for e in found[:MAX_ERRORS]]


def _checked(schema: Any) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        raise Unprocessable("The schema is not a valid JSON Schema (draft 2020-12).",
                            fields=[{"field": _path("schema", e.absolute_path), "message": e.message}]) from None
    found = _unresolvable(schema, Registry().resolver_with_root(DRAFT202012.create_resource(schema)), [])
    if found is not None:
        where, ref = found
        raise Unprocessable("The schema refers to what it does not hold ($refs resolve within the schema only).",
                            fields=[{"field": _path("schema", where), "message": f"cannot resolve {ref!r}"}])


_DATA_KEYWORDS = ("const", "enum", "default", "examples")  # their values are data, not schemas


def _unresolvable(node: Any, resolver: Any, path: list[Any]) -> tuple[list[Any], str] | None:
    """(path, ref) of the first `$ref`/`$dynamicRef` the schema cannot resolve by itself; no ref is
    ever fetched (the registry holds the schema only)."""
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    if isinstance(node, list):
        for i, item in enumerate(node):
            found = _unresolvable(item, resolver, [*path, i])
            if found:
                return found
        return None
    if not isinstance(node, dict):
        return None
    if path and isinstance(node.get("$id"), str):
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
    for keyword in ("$ref", "$dynamicRef"):
        ref = node.get(keyword)
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                return [*path, keyword], ref
    for key, value in node.items():
        if key not in _DATA_KEYWORDS:
            found = _unresolvable(value, resolver, [*path, key])
            if found:
                return found
    return None


def register(principal: Principal, scope_id: str, name: str, version: str, schema: Any) -> dict[str, Any]:
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    _checked(schema)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE, hold=True)
        row = conn.execute(
            f"INSERT INTO work_schemas AS x (scope_id, name, version, schema) VALUES (%s, %s, %s, %s::jsonb)"
            f" ON CONFLICT (scope_id, name, version) DO NOTHING RETURNING {_DOC}",
            (scope_id, name, version, as_json(schema))).fetchone()
        if row is not None:
            audit.record(conn, principal, "scaiqueue.schema.registered", "schema", row[0]["id"], scope_id=scope_id,
                         details={"name": name, "version": version})
    if row is None:
        raise Conflict(f"Schema {name} version {version} already exists in this scope.", code=SLUG_CONFLICT)
    return row[0]


def list_schemas(principal: Principal, scope_id: str) -> list[dict[str, Any]]:
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        rows = conn.execute(f"SELECT {_DOC} FROM work_schemas x WHERE x.scope_id = %s ORDER BY x.name, x.created_at",
                            (scope_id,)).fetchall()
    return [r[0] for r in rows]


def _one(conn: psycopg.Connection, scope_id: str, name: str, version: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_DOC} FROM work_schemas x WHERE x.scope_id = %s AND x.name = %s AND x.version = %s",
                       (scope_id, name, version)).fetchone()
    if row is None:
        raise _missing()
    return row[0]


def get_schema(principal: Principal, scope_id: str, name: str, version: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        return _one(conn, scope_id, name, version)


def validate(principal: Principal, scope_id: str, name: str, version: str, payload: Any) -> dict[str, Any]:
    """{valid, errors: [{field, message}]} for a payload against a registered schema."""
    found = get_schema(principal, scope_id, name, version)
    errors = errors_of(_validator(found["id"], found["schema"]), payload)
    return {"valid": not errors, "errors": errors}


def deprecate(principal: Principal, scope_id: str, name: str, version: str) -> dict[str, Any]:
    """Soft delete: the schema stays (queues naming it keep validating) but no queue can newly name it."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE)
        conn.execute("UPDATE work_schemas SET deprecated = true, updated_at = clock_timestamp()"
                     " WHERE scope_id = %s AND name = %s AND version = %s", (scope_id, name, version))
        found = _one(conn, scope_id, name, version)
        audit.record(conn, principal, "scaiqueue.schema.deprecated", "schema", found["id"], scope_id=scope_id,
                     details={"name": name, "version": version})
        return found


def bind_queue(principal: Principal, scope_id: str, queue_id: str, name: str | None,
               version: str | None) -> dict[str, Any]:
    """Name the schema a queue's bodies must satisfy (None: any body). Answers {queue_id, schema}."""
    tenant_id = require(principal, MANAGE)
    scope_id, queue_id = parse_id(scope_id, SCOPE_NOT_FOUND), parse_id(queue_id, QUEUE_NOT_FOUND)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE, queue=queue_id)
        found = None
        if name is not None:
            found = _one(conn, scope_id, name, version or "")
            if found["deprecated"]:
                raise Unprocessable("A deprecated schema cannot be given to a queue.",
                                    fields=[{"field": "version", "message": "deprecated"}])
        row = conn.execute("UPDATE work_queues SET schema_id = %s, updated_at = clock_timestamp()"
                           " WHERE queue_id = %s AND scope_id = %s RETURNING id",
                           (found["id"] if found else None, queue_id, scope_id)).fetchone()
        if row is None:
            with db.domain_errors():
                conn.execute("SELECT work_queue_of(%s, %s)", (scope_id, queue_id))
        audit.record(conn, principal, "scaiqueue.queue.schema_set", "queue", queue_id, scope_id=scope_id,
                     details={"name": name, "version": version if found else None})
    learn(queue_id, found["id"] if found else None)
    return {"queue_id": queue_id, "schema": {"name": name, "version": version} if found else None}


# ---- the publish path ---------------------------------------------------------------------------


def _validator(schema_id: str, schema: Any = None) -> Draft202012Validator:
    found = _validators.get(schema_id)
    if found is None:
        from jsonschema import Draft202012Validator

        if schema is None:
            with db.connection() as conn:
                row = conn.execute("SELECT schema FROM work_schemas WHERE id = %s", (schema_id,)).fetchone()
            schema = row[0] if row else {}
        found = Draft202012Validator(schema)
        with _lock:
            _validators[schema_id] = found
    return found


def believed(queue_id: str) -> str | None:
    """The schema id this process last saw the queue name (None: none, or not seen yet)."""
    return _queue_schema.get(queue_id)


def learn(queue_id: str, schema_id: str | None) -> None:
    with _lock:
        if len(_queue_schema) > 100_000:
            _queue_schema.clear()
        _queue_schema[queue_id] = schema_id


def _errors(schema_id: str | None, body: Any) -> list[dict[str, str]]:
    return errors_of(_validator(schema_id), body, "body") if schema_id else []


def checked(queue_id: str, schema_id: str | None, body: Any) -> str | None:
    """The schema id to publish with, once the body satisfies it. A body refused by the schema
    this process believed is checked again against the one the queue names now (one read, only
    on refusals): the queue may have changed its schema since. Refusal: VALIDATION_ERROR with
    the validator's paths."""
    schema_id, [refusal] = checked_each(queue_id, schema_id, [body])
    if refusal is not None:
        raise refusal
    return schema_id


def checked_each(queue_id: str, schema_id: str | None,
                 bodies: list[Any]) -> tuple[str | None, list[Unprocessable | None]]:
    """`checked` for the bodies of a batch: the schema id to publish with and, for each body, its
    refusal (an Unprocessable) or None. The queue's schema is read once, when a body is refused."""
    errors = [_errors(schema_id, body) for body in bodies]
    if any(errors):
        with db.connection() as conn:
            row = conn.execute("SELECT schema_id FROM work_queues WHERE queue_id = %s", (queue_id,)).fetchone()
        current = str(row[0]) if row and row[0] else None
        if current != schema_id:
            learn(queue_id, current)
            schema_id, errors = current, [_errors(current, body) for body in bodies]
    return schema_id, [Unprocessable("The body does not satisfy the queue's schema.", fields=found) if found else None
                       for found in errors]
