"""Routes of the work surface's audit log: query, trace a correlation chain, stats by event type, and
the tenant-level events (work API keys, GDPR jobs).

Parses and shapes only; the journal behind it lives in `postbox.work.audit`.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from functions.api.work.envelope import Cursor, Limit, caller, data, listing
from postbox.work import audit

router = Router()
AUDIT = "/scopes/<scope_id>/audit"
Filter = Annotated[str | None, Query(min_length=1, max_length=256)]


@router.get(AUDIT)
def query_audit(scope_id: str, event_type: Filter = None, actor_id: Filter = None, resource_type: Filter = None,
                correlation_id: Filter = None, limit: Limit = 50, cursor: Cursor = None):
    return listing(audit.query(caller(), scope_id, event_type=event_type, actor_id=actor_id,
                               resource_type=resource_type, correlation_id=correlation_id, limit=limit,
                               cursor=cursor))


@router.get(AUDIT + "/trace/<correlation_id>")
def trace_audit(scope_id: str, correlation_id: str):
    return data(audit.trace(caller(), scope_id, correlation_id))


@router.get(AUDIT + "/stats")
def audit_stats(scope_id: str):
    return data(audit.stats(caller(), scope_id))


@router.get("/tenants/<tenant_id>/audit")
def tenant_audit(tenant_id: str, event_type: Filter = None, actor_id: Filter = None, resource_type: Filter = None,
                 limit: Limit = 50, cursor: Cursor = None):
    return listing(audit.query_tenant(caller(), tenant_id, event_type=event_type, actor_id=actor_id,
                                      resource_type=resource_type, limit=limit, cursor=cursor))
