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
def query_data(tmp_path_factory):
    """A botocore data path holding SQS's model in its Query form (see `write_query_model`)."""
    return write_query_model(tmp_path_factory.mktemp("botocore-data"))


@pytest.fixture
def both(gateway, mint, query_data):
    """(boto3 speaking JSON, botocore speaking Query) of one fresh tenant, with one manage credential
    (`credential` on each)."""
    credential = mint("manage")
    pair = sqs_client(gateway.url, credential), query_sqs_client(gateway.url, credential, query_data)
    for one in pair:
        one.credential = credential
        one.gateway_url = gateway.url
    return pair
