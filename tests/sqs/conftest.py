"""SQS clients (boto3, over HTTP) on the session's local gateway, signed with credentials minted
for a fresh tenant."""

from __future__ import annotations

import pytest
from sqs_clients import query_sqs_client, sqs_client, write_query_model

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


@pytest.fixture(scope="session")
def query_model_path(tmp_path_factory):
    """A botocore data path holding SQS's model in its Query form."""
    return write_query_model(tmp_path_factory.mktemp("botocore-query-data"))


@pytest.fixture(params=["json", "query"])
def any_sqs(request, gateway, mint, query_model_path):
    """An SQS client of a fresh tenant (manage credential) speaking JSON 1.0 (boto3), then Query (botocore)."""
    credential = mint("manage")
    if request.param == "json":
        client = sqs_client(gateway.url, credential)
    else:
        client = query_sqs_client(gateway.url, credential, query_model_path)
    client.protocol = request.param
    return client
