"""HITL patterns: reusable human-in-the-loop specs of a scope, with `{{key}}` placeholders.

A spec is keyed (`context`, `decision`, `input`) or a list of `sections` (each `context`,
`decision` or `input`); either is stored, expanded and read back as written, and a response is
checked against its decisions and inputs (`work_hitl_parts` reads both forms).

Expansion is plain text substitution in every string of the spec, one pass, never evaluating
anything: a value that itself holds `{{…}}` stays as given. A pattern never changes once
registered, so a publish naming one expands it from a per-process copy after the first load.
A reviewer's response is checked against the spec's `decision` and `input` by the complete
function itself (`work_complete_checked`), in the complete's one SQL call.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import psycopg

from .. import db
from ..errors import Conflict, NotFound, Unprocessable
from ..tenancy import Principal, require
from . import acl, audit
from .common import MANAGE, SCOPE_NOT_FOUND, SLUG_CONFLICT, VIEW, as_json, parse_id

PATTERN_NOT_FOUND = "SCAIQUEUE_HITL_PATTERN_NOT_FOUND"
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

_DOC = """jsonb_build_object('id', x.id, 'scope_id', x.scope_id, 'name', x.name, 'version', x.version,
    'spec', x.spec, 'parameters', x.parameters, 'created_at', x.created_at)"""

_patterns: dict[tuple[str, str, str, str], dict[str, Any]] = {}  # (tenant, scope, name, version) -> pattern
_lock = threading.Lock()


def _missing() -> NotFound:
    return NotFound("HITL pattern not found.", code=PATTERN_NOT_FOUND)


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, text) of every string in a JSON value, keys excepted."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}.{i}")


def _substitute(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: values[m.group(1)], value)
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    return value


def _declared(spec: dict[str, Any], parameters: list[dict[str, Any]]) -> None:
    """Every placeholder of the spec must be a declared parameter."""
    names = {p["name"] for p in parameters}
    for path, text in _strings(spec, "spec"):
        for key in PLACEHOLDER.findall(text):
            if key not in names:
                raise Unprocessable(f"The placeholder {{{{{key}}}}} is not a declared parameter.",
                                    fields=[{"field": path, "message": f"undeclared parameter {key!r}"}])


def _asks(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, part) of each decision and input of a spec, keyed or written as sections (the parts
    work_hitl_errors checks a response against)."""
    if isinstance(spec.get("decision"), dict):
        yield "spec.decision", spec["decision"]
    for i, part in enumerate(spec.get("input") or ()):
        yield f"spec.input.{i}", part
    for i, part in enumerate(spec.get("sections") or ()):
        if part.get("type") in ("decision", "input"):
            yield f"spec.sections.{i}", part


def _distinct(spec: dict[str, Any]) -> None:
    """Each response field is asked for once: two parts naming one field could never both be met."""
    seen: set[str] = set()
    for path, part in _asks(spec):
        if part.get("field") in seen:
            says = f"{part['field']!r} is asked for already"
            raise Unprocessable(f"The response field {part['field']!r} is asked for twice.",
                                fields=[{"field": f"{path}.field", "message": says}])
        seen.add(part.get("field"))


def expand(pattern: dict[str, Any], given: dict[str, Any], at: str = "parameters") -> dict[str, Any]:
    """The pattern's spec with its placeholders replaced: given values, else defaults, else ""
    for optional parameters; a missing required one or an unknown one is refused."""
    declared = {p["name"]: p for p in pattern["parameters"]}
    problems = [{"field": f"{at}.{k}", "message": "unknown parameter"} for k in given if k not in declared]
    values: dict[str, str] = {}
    for name, p in declared.items():
        if name in given and given[name] is not None:
            values[name] = given[name] if isinstance(given[name], str) else json.dumps(given[name])
        elif p.get("default") is not None:
            values[name] = p["default"]
        elif p.get("required", True):
            problems.append({"field": f"{at}.{name}", "message": "required"})
        else:
            values[name] = ""
    if problems:
        raise Unprocessable("The parameters do not fit the pattern.", fields=problems)
    return _substitute(pattern["spec"], values)


def register(principal: Principal, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    parameters = fields.get("parameters") or []
    _declared(fields["spec"], parameters)
    _distinct(fields["spec"])
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE, hold=True)
        row = conn.execute(
            f"INSERT INTO work_hitl_patterns AS x (scope_id, name, version, spec, parameters)"
            f" VALUES (%s, %s, %s, %s::jsonb, %s::jsonb) ON CONFLICT (scope_id, name, version) DO NOTHING"
            f" RETURNING {_DOC}",
            (scope_id, fields["name"], fields["version"], as_json(fields["spec"]), as_json(parameters))).fetchone()
        if row is not None:
            audit.record(conn, principal, "scaiqueue.hitl_pattern.registered", "hitl_pattern", row[0]["id"],
                         scope_id=scope_id, details={"name": fields["name"], "version": fields["version"]})
    if row is None:
        raise Conflict(f"Pattern {fields['name']} version {fields['version']} already exists in this scope.",
                       code=SLUG_CONFLICT)
    return row[0]


def list_patterns(principal: Principal, scope_id: str) -> list[dict[str, Any]]:
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        rows = conn.execute(f"SELECT {_DOC} FROM work_hitl_patterns x WHERE x.scope_id = %s"
                            " ORDER BY x.name, x.created_at", (scope_id,)).fetchall()
    return [r[0] for r in rows]


def _load(tenant_id: str, scope_id: str, name: str, version: str) -> dict[str, Any]:
    key = (tenant_id, scope_id, name, version)
    found = _patterns.get(key)
    if found is None:
        with db.connection() as conn:
            with db.domain_errors():
                conn.execute("SELECT work_scope_of(%s, %s)", (tenant_id, scope_id))
            row = conn.execute(f"SELECT {_DOC} FROM work_hitl_patterns x WHERE x.scope_id = %s AND x.name = %s"
                               " AND x.version = %s", (scope_id, name, version)).fetchone()
        if row is None:
            raise _missing()
        found = row[0]
        with _lock:
            if len(_patterns) > 10_000:
                _patterns.clear()
            _patterns[key] = found
    return found


def get_pattern(principal: Principal, scope_id: str, name: str, version: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:  # the ACL is checked on every read, the pattern itself may be cached
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
    return _load(tenant_id, scope_id, name, version)


def expand_pattern(principal: Principal, scope_id: str, name: str, version: str,
                   parameters: dict[str, Any]) -> dict[str, Any]:
    """{name, version, spec}: the spec a message would carry with these parameters."""
    found = get_pattern(principal, scope_id, name, version)
    return {"name": name, "version": version, "spec": expand(found, parameters)}


def spec_for_publish(tenant_id: str, scope_id: str, reference: dict[str, Any]) -> dict[str, Any]:
    """The hitl_spec of a publish (its caller already checked) that names a pattern
    ({name, version, parameters})."""
    found = _load(tenant_id, scope_id, reference["name"], str(reference["version"]))
    return expand(found, reference.get("parameters") or {}, "hitl_pattern.parameters")


@contextlib.contextmanager
def response_errors() -> Iterator[None]:
    """A complete refused by work_complete_checked as VALIDATION_ERROR naming the response's fields."""
    try:
        yield
    except psycopg.Error as e:
        if e.sqlstate == "PB422" and e.diag.message_hint:
            raise Unprocessable(e.diag.message_primary or "", fields=json.loads(e.diag.message_hint)) from None
        raise
