"""SQS clients (boto3, over HTTP) on the session's local gateway, signed with credentials minted
for a fresh tenant."""

from __future__ import annotations

import pytest
from sqs_clients import sqs_client

from postbox.sqs import credentials


@pytest.fixture
def mint(tenant):
    """mint(role="manage", tenant_id=None) -> a new credential's JSON (access_key_id, secret_access_key)."""

    def make(role: str = "manage", tenant_id: str | None = None, project: str | None = None) -> dict:
        return credentials.mint(tenant_id or tenant.tenant_id, role, project=project)

    return make


@pytest.fixture
def sqs(gateway, mint):
    """A boto3 SQS client of a fresh tenant, with a manage credential."""
    client = sqs_client(gateway.url, mint("manage"))
    client.gateway_url = gateway.url
    return client


@pytest.fixture
def client_for(gateway, mint):
    """client_for(role) -> a boto3 SQS client of the same tenant with a credential of that role."""
    return lambda role="manage", **kw: sqs_client(gateway.url, mint(role, **kw))
