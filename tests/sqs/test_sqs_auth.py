"""Who may call the SQS endpoint: SigV4 verified as AWS does (each failure answered with AWS's code
and status), credentials minted over the API and by `postbox admin`, sealed at rest, roles mapped
onto actions, and another tenant's queue answered as one that does not exist."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from sqs_clients import signing_at, sqs_client

from functions.local.cli import main
from postbox import db, tenancy
from postbox.sqs import credentials
from support.http import client

TARGET = "AmazonSQS.ListQueues"


def signed(url: str, credential: dict, body: bytes = b"{}", *, region="us-east-1", service="sqs",
           at: datetime | None = None, target: str = TARGET, secret: str | None = None,
           token: str | None = None) -> AWSRequest:
    request = AWSRequest(method="POST", url=url, data=body, headers={
        "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": target})
    signer = SigV4Auth(Credentials(credential["access_key_id"], secret or credential["secret_access_key"], token),
                       service, region)
    with signing_at(at or datetime.now(UTC)):
        signer.add_auth(request)
    return request


def send(request: AWSRequest, body: bytes | None = None, drop: str | None = None) -> httpx.Response:
    headers = {k: v for k, v in request.headers.items() if k.lower() != (drop or "").lower()}
    return httpx.post(request.url, content=request.body if body is None else body, headers=headers, timeout=30)


def refused(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["x-amzn-query-error"] == f"{code};Sender"
    assert response.headers["content-type"] == "application/x-amz-json-1.0"
    body = response.json()
    assert set(body) == {"__type", "message"} and "#" in body["__type"]
    return body


@pytest.fixture
def endpoint(gateway) -> str:
    return f"{gateway.url}/sqs"


def test_a_signed_request_is_served(endpoint, mint):
    assert send(signed(endpoint, mint())).status_code == 200


@pytest.mark.parametrize("change, status, code", [
    ({"secret": "wrong" * 8}, 403, "SignatureDoesNotMatch"),
    ({"region": "eu-west-1"}, 403, "SignatureDoesNotMatch"),
    ({"service": "sns"}, 403, "SignatureDoesNotMatch"),
    ({"skew": timedelta(minutes=-6)}, 400, "RequestExpired"),
    ({"skew": timedelta(minutes=6)}, 400, "RequestExpired"),
])
def test_signature_failures(endpoint, mint, change, status, code):
    change = dict(change)
    if "skew" in change:  # signed that far from the time the test runs (not from its collection)
        change["at"] = datetime.now(UTC) + change.pop("skew")
    refused(send(signed(endpoint, mint(), **change)), status, code)


def test_within_the_allowed_skew_and_a_replay_within_it_are_served(endpoint, mint):
    request = signed(endpoint, mint(), at=datetime.now(UTC) - timedelta(minutes=4))
    assert send(request).status_code == 200
    assert send(request).status_code == 200  # as AWS: no replay cache inside the window


def test_an_altered_request_is_refused(endpoint, mint):
    credential = mint()
    request = signed(endpoint, credential, b'{"QueueNamePrefix":"a"}')
    refused(send(request, b'{"QueueNamePrefix":"b"}'), 403, "SignatureDoesNotMatch")
    request = signed(endpoint, credential)
    request.headers.replace_header("X-Amz-Target", "AmazonSQS.CreateQueue")
    refused(send(request), 403, "SignatureDoesNotMatch")
    other_path = signed(endpoint, credential)
    assert send(other_path).status_code == 200
    moved = httpx.post(endpoint + "/000000000000/q", content=other_path.body, headers=dict(other_path.headers))
    assert moved.status_code == 403 and moved.headers["x-amzn-query-error"] == "SignatureDoesNotMatch;Sender"


def test_missing_headers(endpoint, mint):
    credential = mint()
    refused(send(signed(endpoint, credential), drop="Authorization"), 403, "MissingAuthenticationToken")
    refused(send(signed(endpoint, credential), drop="X-Amz-Date"), 400, "IncompleteSignature")
    request = signed(endpoint, credential)
    request.headers.replace_header("Authorization", "AWS4-HMAC-SHA256 Credential=x/y")
    refused(send(request), 400, "IncompleteSignature")
    request.headers.replace_header("Authorization", "Basic abc")
    refused(send(request), 400, "IncompleteSignature")


def test_unknown_and_revoked_keys(endpoint, mint, tenant):
    fake = {"access_key_id": "PBSQ" + "A" * 16, "secret_access_key": "x" * 40}
    refused(send(signed(endpoint, fake)), 403, "InvalidClientTokenId")
    refused(send(signed(endpoint, {**fake, "access_key_id": "AKIAIOSFODNN7EXAMPLE"})), 403, "InvalidClientTokenId")
    credential = mint()
    assert send(signed(endpoint, credential)).status_code == 200
    credentials.revoke(tenant.tenant_id, credential["access_key_id"])
    refused(send(signed(endpoint, credential)), 403, "InvalidClientTokenId")


def test_a_session_token_is_refused_as_no_credential_has_one(endpoint, mint):
    request = signed(endpoint, mint(), token="FwoGZXIvYXdzEXAMPLE")
    assert "X-Amz-Security-Token" in request.headers
    body = refused(send(request), 403, "InvalidClientTokenId")
    assert body["message"] == "The security token included in the request is invalid."


def test_an_expired_credential_is_refused(endpoint, tenant):
    credential = credentials.mint(tenant.tenant_id, "manage", expires_in_days=1)
    assert send(signed(endpoint, credential)).status_code == 200
    with db.transaction() as conn:  # its time comes (moved by SQL, never slept through)
        conn.execute("UPDATE sqs_credentials SET expires_at = clock_timestamp() - interval '1 second'"
                     " WHERE access_key_id = %s", (credential["access_key_id"],))
    credentials.clear_cache()
    refused(send(signed(endpoint, credential)), 403, "InvalidClientTokenId")


def test_the_secret_is_stored_sealed(mint):
    credential = mint()
    with db.transaction() as conn:
        (sealed,) = conn.execute("SELECT secret_sealed FROM sqs_credentials WHERE access_key_id = %s",
                                 (credential["access_key_id"],)).fetchone()
    assert credential["secret_access_key"].encode() not in bytes(sealed)


def test_another_tenants_queue_does_not_exist(gateway, sqs, make_tenant):
    url = sqs.create_queue(QueueName="private")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="mine")
    stranger = sqs_client(gateway.url, credentials.mint(make_tenant().tenant_id, "manage"))
    for call in (lambda: stranger.receive_message(QueueUrl=url),
                 lambda: stranger.get_queue_attributes(QueueUrl=url),
                 lambda: stranger.send_message(QueueUrl=url, MessageBody="x"),
                 lambda: stranger.purge_queue(QueueUrl=url)):
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert "Messages" in sqs.receive_message(QueueUrl=url)


def test_two_tenants_at_once_each_see_only_their_own(gateway, make_tenant):
    """The endpoint serves several requests of one process at once (a thread per connection here):
    two tenants' interleaved calls, each on queues of the same names, each answered for its caller."""
    from support.interleaved import run_interleaved

    clients = {t: sqs_client(gateway.url, credentials.mint(make_tenant().tenant_id, "manage")) for t in "ab"}
    urls = {t: c.create_queue(QueueName="shared-name")["QueueUrl"] for t, c in clients.items()}
    assert urls["a"] != urls["b"]
    failures: list[str] = []
    got: dict[str, list[str]] = {"a": [], "b": []}

    def calls(t: str) -> None:
        client, url = clients[t], urls[t]
        try:
            for n in range(15):
                client.send_message(QueueUrl=url, MessageBody=f"{t}-{n}")
                assert client.get_queue_url(QueueName="shared-name")["QueueUrl"] == url
                assert client.list_queues()["QueueUrls"] == [url]
                for m in client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
                    got[t].append(m["Body"])
                    client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        except Exception as error:  # reported below, by thread
            failures.append(f"{t}: {error!r}")

    run_interleaved(calls, list(clients), timeout_s=120)
    assert failures == []
    for t in clients:
        assert sorted(got[t]) == sorted(f"{t}-{n}" for n in range(15))


def test_a_queue_url_as_the_request_target(endpoint, sqs, mint, tenant):
    url = sqs.create_queue(QueueName="targeted")["QueueUrl"]
    credential = mint()
    request = signed(url, credential, json.dumps({"MessageBody": "via url"}).encode(), target="AmazonSQS.SendMessage")
    assert send(request).status_code == 200
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "via url"
    stranger = credentials.mint(tenancy.create_tenant(f"t-{uuid.uuid4().hex[:10]}", plan="pro"), "manage")
    request = signed(url, stranger, json.dumps({"MessageBody": "x"}).encode(), target="AmazonSQS.SendMessage")
    assert send(request).headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"


def test_roles_map_onto_actions(sqs, client_for):
    url = sqs.create_queue(QueueName="roles")["QueueUrl"]
    reader, writer = client_for("read"), client_for("write")
    assert reader.get_queue_url(QueueName="roles")["QueueUrl"] == url
    assert reader.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert reader.list_queues()["QueueUrls"] == [url]
    for call in (lambda: reader.send_message(QueueUrl=url, MessageBody="x"),
                 lambda: reader.receive_message(QueueUrl=url),
                 lambda: writer.create_queue(QueueName="nope"),
                 lambda: writer.purge_queue(QueueUrl=url),
                 lambda: writer.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "1"}),
                 lambda: writer.tag_queue(QueueUrl=url, Tags={"a": "b"}),
                 lambda: writer.delete_queue(QueueUrl=url)):
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.response["Error"]["Code"] == "AccessDenied"
    writer.send_message(QueueUrl=url, MessageBody="w")
    (m,) = writer.receive_message(QueueUrl=url, VisibilityTimeout=5)["Messages"]
    writer.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    writer.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def test_a_project_credential_sees_its_projects_queues_only(gateway, sqs, tenant):
    mine = sqs_client(gateway.url, credentials.mint(tenant.tenant_id, "manage", project="web"))
    mine.create_queue(QueueName="web-only")
    assert [u.rsplit("/", 1)[1] for u in mine.list_queues()["QueueUrls"]] == ["web-only"]
    assert "QueueUrls" not in sqs.list_queues() or "web-only" not in str(sqs.list_queues()["QueueUrls"])


def test_other_protocols_and_actions_are_answered_as_sqs_does(endpoint, mint):
    refused(send(signed(endpoint, mint(), target="AmazonSQS.NoSuchThing")), 400, "InvalidAction")
    unsigned_query = httpx.post(endpoint, content=b"Action=ListQueues&Version=2012-11-05",
                                headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert unsigned_query.status_code == 403 and unsigned_query.headers["content-type"].startswith("text/xml")
    assert "<Code>MissingAuthenticationToken</Code>" in unsigned_query.text  # the Query protocol answers in XML
    bad_json = signed(endpoint, mint(), b"{not json")
    assert send(bad_json).status_code == 400
    deep = signed(endpoint, mint(), b"[" * 10_000)
    assert send(deep).status_code == 400
    array = signed(endpoint, mint(), b"[1]")
    assert send(array).status_code == 400


def test_credentials_over_the_api(gateway, tenant):
    with client(gateway.url, tenant.key) as api:
        minted = api.post("/api/v1/sqs/credentials", json={"role": "read", "name": "ci"})
        assert minted.status_code == 201
        pair = minted.json()
        assert pair["access_key_id"].startswith("PBSQ") and len(pair["secret_access_key"]) == 40
        listed = api.get("/api/v1/sqs/credentials").json()["credentials"]
        assert [c["access_key_id"] for c in listed] == [pair["access_key_id"]]
        assert pair["secret_access_key"] not in json.dumps(listed)
        assert api.post("/api/v1/sqs/credentials", json={"role": "admin"}).status_code == 422
        assert api.post("/api/v1/sqs/credentials", json={"role": "read", "extra": 1}).status_code == 422
        assert api.delete(f"/api/v1/sqs/credentials/{pair['access_key_id']}").status_code == 200
        assert api.delete("/api/v1/sqs/credentials/PBSQNOPE").status_code == 404
    with client(gateway.url, tenant.key_for("write")) as api:
        assert api.post("/api/v1/sqs/credentials", json={}).status_code == 403
    with client(gateway.url, None) as api:
        assert api.post("/api/v1/sqs/credentials", json={}).status_code == 401


def test_postbox_admin_sqs_credentials(database_url, capsys, gateway):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    assert main(["admin", "tenant-create", name, "--plan", "pro"]) == 0
    capsys.readouterr()
    assert main(["admin", "sqs-credentials", name, "--role", "manage"]) == 0
    pair = json.loads(capsys.readouterr().out)
    assert set(pair) >= {"access_key_id", "secret_access_key"} and pair["role"] == "manage"
    assert sqs_client(gateway.url, pair).create_queue(QueueName="cli")["QueueUrl"].endswith("/cli")
    assert main(["admin", "sqs-credentials", "no-such-tenant"]) == 1
    capsys.readouterr()
    assert main(["admin", "sqs-credentials", name, "--days", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["expires_at"] is not None
