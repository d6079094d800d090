"""A cell in another AWS region than the functions' (issue #42): its IAM database tokens are signed
for its region (a token signed for another is refused), and its secrets are read from its region,
through the Secrets Manager endpoint the cell names (moto stands in for AWS; no database here)."""

from __future__ import annotations

import json
from urllib.parse import unquote

import boto3
import psycopg
import pytest
from moto import mock_aws

from postbox import aws, cells, config, db

HOME, ELSEWHERE = "us-east-1", "eu-west-1"
ENDPOINT = f"https://vpce-0abc.secretsmanager.{ELSEWHERE}.vpce.amazonaws.com"


@pytest.fixture
def on_aws(monkeypatch):
    """The functions' settings on AWS, in HOME; each test says its cells (POSTBOX_CELLS)."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for name, value in (("AWS_REGION", HOME), ("AWS_DEFAULT_REGION", HOME), ("AWS_ACCESS_KEY_ID", "testing"),
                        ("AWS_SECRET_ACCESS_KEY", "testing"), ("POSTBOX_DB_HOST", "home.proxy.internal")):
        monkeypatch.setenv(name, value)

    def told(*listed: dict) -> None:
        monkeypatch.setenv("POSTBOX_CELLS", json.dumps(list(listed)))
        config.reset()

    aws.reset()
    db.forget_credentials()
    yield told
    aws.reset()
    db.forget_credentials()
    config.reset()


def _signed_for(conninfo: str) -> str:
    """The region an IAM token (a presigned URL: the conninfo's password) is signed for."""
    credential = next(p for p in unquote(psycopg.conninfo.conninfo_to_dict(conninfo)["password"]).split("&")
                      if p.startswith("X-Amz-Credential="))
    return credential.split("/")[2]


def test_iam_tokens_are_signed_for_each_cells_region(on_aws, monkeypatch):
    monkeypatch.setenv("POSTBOX_DB_IAM_AUTH", "true")
    monkeypatch.setenv("POSTBOX_DB_USER", "postbox_app")
    on_aws({"name": "cell-1", "db_host": "home.proxy.internal"},
           {"name": "cell-2", "db_host": "far.proxy.internal", "region": ELSEWHERE})
    assert _signed_for(db.conninfo(cells.named("cell-1"))) == HOME
    assert _signed_for(db.conninfo(cells.named("cell-2"))) == ELSEWHERE


def test_a_long_polls_listen_connection_to_a_cell_elsewhere_is_signed_for_its_region(on_aws, monkeypatch):
    monkeypatch.setenv("POSTBOX_DB_IAM_AUTH", "true")
    monkeypatch.setenv("POSTBOX_DB_USER", "postbox_app")
    on_aws({"name": "cell-1", "db_host": "home.proxy.internal", "listen_host": "home.cluster.internal"},
           {"name": "cell-2", "db_host": "far.proxy.internal", "listen_host": "far.cluster.internal",
            "region": ELSEWHERE})
    tried = []

    def connect(info, **kwargs):
        tried.append(info)
        raise psycopg.OperationalError("no server here")

    monkeypatch.setattr(db.PooledConnection, "connect", connect)
    for name in ("cell-1", "cell-2"):
        with cells.use(name), pytest.raises(psycopg.OperationalError):
            db.listen_connect()
    hosts = [psycopg.conninfo.conninfo_to_dict(info)["host"] for info in tried]
    assert hosts == ["home.cluster.internal", "far.cluster.internal"]
    assert [_signed_for(info) for info in tried] == [HOME, ELSEWHERE]


def test_a_cells_secret_is_read_in_its_region_through_the_endpoint_it_names(on_aws, monkeypatch):
    made = []
    real_client = aws.client

    def client(service, *, region=None, endpoint_url=None, **kwargs):
        made.append((service, region, endpoint_url))
        return real_client(service, region=region, **kwargs)  # moto answers at the region's usual URL

    monkeypatch.setattr(aws, "client", client)
    with mock_aws():
        home = boto3.client("secretsmanager", region_name=HOME).create_secret(
            Name="master", SecretString=json.dumps({"username": "postbox", "password": "here"}))["ARN"]
        # The same name in the other region, another secret: read from HOME it would be the wrong one.
        far = boto3.client("secretsmanager", region_name=ELSEWHERE).create_secret(
            Name="master", SecretString=json.dumps({"username": "postbox", "password": "there"}))["ARN"]
        on_aws({"name": "cell-1", "db_host": "home.proxy.internal", "db_secret_arn": home},
               {"name": "cell-2", "db_host": "far.proxy.internal", "db_secret_arn": far, "region": ELSEWHERE,
                "secrets_endpoint": ENDPOINT})
        infos = {name: psycopg.conninfo.conninfo_to_dict(db.conninfo(cells.named(name)))
                 for name in ("cell-1", "cell-2")}
    assert (infos["cell-1"]["host"], infos["cell-1"]["password"]) == ("home.proxy.internal", "here")
    assert (infos["cell-2"]["host"], infos["cell-2"]["password"]) == ("far.proxy.internal", "there")
    assert ("secretsmanager", ELSEWHERE, ENDPOINT) in made
    assert ("secretsmanager", None, None) in made  # the first cell's: the functions' own region


def test_a_client_through_an_endpoint_is_made_for_its_region_and_kept(on_aws):
    on_aws({"name": "cell-1"})
    far = aws.client("secretsmanager", region=ELSEWHERE, endpoint_url=ENDPOINT)
    assert far.meta.region_name == ELSEWHERE and far.meta.endpoint_url == ENDPOINT
    assert aws.client("secretsmanager", region=ELSEWHERE, endpoint_url=ENDPOINT) is far
    home = aws.client("secretsmanager")
    assert home is not far and home.meta.region_name == HOME
