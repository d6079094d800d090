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


@pytest.fixture(scope="session")
def query_data(query_model_path):
    """The same botocore data path, by the name the error tests use."""
    return query_model_path


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


@pytest.fixture(params=["json", "query"])
def speaking(request, gateway, mint, query_model_path):
    """speaking(role="manage") -> an SQS client of the test's tenant speaking this run's protocol:
    boto3's JSON, then botocore's Query (an SDK from before 2024); `speaking.protocol` names it.
    For tests that need several clients of one tenant (any_sqs is one client)."""

    def make(role: str = "manage"):
        if request.param == "json":
            return sqs_client(gateway.url, mint(role))
        return query_sqs_client(gateway.url, mint(role), query_model_path)

    make.protocol = request.param
    return make
