"""How many of each kind of resource a tenant's plan allows. Each limit is the column of `plans` of
its name; one SQL function (`plan_limit_check`) counts what the tenant has of that kind, under a
lock of the tenant's for that limit held until the creating transaction ends, so that concurrent
creations never both take the last place. One too many is `LimitExceeded` with the limit's name as
its code and `limit` and `value` in its details; each surface answers it in its own envelope."""

from __future__ import annotations

import psycopg

from . import db

QUEUES = "max_queues"  # queues API and SQS queues alike: an SQS queue is a Postbox queue
DURABLE_STREAMS = "max_durable_streams"
KEYED_STREAMS = "max_keyed_streams"
KEYED_SUBSCRIPTIONS = "max_keyed_subscriptions"
PARTITIONED_QUEUES = "max_partitioned_queues"
FLOWS = "max_flows"
WORK_SCOPES = "max_work_scopes"
WORK_QUEUES = "max_work_queues"
WORK_SUBSCRIPTIONS = "max_work_subscriptions"
WEBHOOKS = "max_webhooks"  # the work surface's push subscriptions
SQS_CREDENTIALS = "max_sqs_credentials"
API_KEYS = "max_api_keys"
PROJECTS = "max_projects"  # made by POST /v1/projects, or by an SQS credential or key naming a new one

ALL = (QUEUES, DURABLE_STREAMS, KEYED_STREAMS, KEYED_SUBSCRIPTIONS, PARTITIONED_QUEUES, FLOWS, WORK_SCOPES,
       WORK_QUEUES, WORK_SUBSCRIPTIONS, WEBHOOKS, SQS_CREDENTIALS, API_KEYS, PROJECTS)


def check(conn: psycopg.Connection, tenant_id: str, limit: str) -> None:
    """Refuse one more resource of the kind `limit` counts (LimitExceeded) when the tenant has as
    many as its plan allows. Call it in the transaction that creates the resource, before its insert."""
    with db.domain_errors():
        conn.execute("SELECT plan_limit_check(%s, %s, 1)", (tenant_id, limit))
