"""Who may do what to which streams. The open form (`/v1/stream/{name}`) names the caller's own
streams; the hosted form (`/{account}/s.{name}`) names an account's, readable without a key (or
with a project's `anon` key) only where a stream is public. Roles are checked by the shared
`tenancy.require`; another tenant's stream is a 404, never a 403."""

from __future__ import annotations

import time
from typing import NamedTuple

from postbox import config, db, directory, tenancy
from postbox.errors import Gone, NotFound, Unauthorized
from postbox.tenancy import Principal

from . import catalog
from .model import Scope

OPEN_TENANT_ENV = "POSTBOX_DURABLE_OPEN_TENANT"
ACCOUNT_TTL_S, MISSING_ACCOUNT_TTL_S = 60.0, 5.0
READ, WRITE = "read", "write"


class Access(NamedTuple):
    """The streams a request may use, and whether it may read only public ones (no key, or `anon`)."""

    scope: Scope
    public_only: bool = False


_accounts: dict[str, tuple[float, Scope | None]] = {}


def account(name: str) -> Scope | None:
    """An account (tenant) by name with its default project, cached briefly (a missing one shortly);
    the request goes on on the account's cell."""
    now = time.monotonic()
    hit = _accounts.get(name)
    if hit and hit[0] > now:
        if hit[1] is not None:
            directory.route(hit[1].tenant_id)
        return hit[1]
    found = None
    tenant_id = tenancy.tenant_id_by_name(name)
    if tenant_id is not None:
        directory.route(tenant_id)
        with db.connection() as conn:
            found = Scope(tenant_id, tenancy.find_project(conn, tenant_id)[0])
    _accounts[name] = (now + (ACCOUNT_TTL_S if found else MISSING_ACCOUNT_TTL_S), found)
    return found


def _keyed(principal: Principal | None, need: str) -> Access:
    """A key's own project, for what its role allows (no key: 401; `anon`: reads of public streams)."""
    tenancy.require(principal, need, anonymous=need == READ)
    assert principal is not None  # require refused None
    return Access(Scope(principal.tenant_id, tenancy.project_id(principal)), public_only=principal.is_anonymous)


def open_form(principal: Principal | None, need: str) -> Access:
    """`/v1/stream/{name}`: a key's own streams. Without one, only where the deployment maps anonymous
    callers to a tenant (`POSTBOX_DURABLE_OPEN_TENANT`), with every right there."""
    if principal is None:
        open_tenant = config.settings().durable_open_tenant  # OPEN_TENANT_ENV
        scope = account(open_tenant) if open_tenant else None
        if scope is not None:
            return Access(scope)
    return _keyed(principal, need)  # no key: 401


def hosted_form(account_name: str, principal: Principal | None, need: str) -> Access:
    """`/{account}/s.{name}`: the account's streams for its own keys; without a key, reads of its
    public streams (an unknown account answers as a private stream does)."""
    if principal is None:
        if need != READ:
            raise Unauthorized("A key is required.", code="INVALID_CREDENTIAL")
        scope = account(account_name)
        if scope is None:
            raise _private()
        return Access(scope, public_only=True)
    scope = account(account_name)
    if scope is None or scope.tenant_id != principal.tenant_id:
        raise NotFound("Stream not found.", code="STREAM_NOT_FOUND")
    return _keyed(principal, need)


def require_readable(access: Access, name: str) -> None:
    """A caller limited to public streams gets 401 for any other, missing and deleted ones included,
    so it cannot tell which exist."""
    if not access.public_only:
        return
    try:
        stream = catalog.head(access.scope, name)
    except (NotFound, Gone):
        stream = None
    if stream is None or not stream.public:
        raise _private()


def _private() -> Unauthorized:
    return Unauthorized("A key is required to read this stream.", code="INVALID_CREDENTIAL")
