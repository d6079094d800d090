"""Presigned requests: SigV4 in the query string, as botocore's `generate_presigned_url` makes it,
called with plain HTTP (urllib), GET and POST. A Query client's URL carries the action and its
parameters and is served; a JSON client's URL signs headers the caller must send, and its
parameters are not where the JSON protocol reads them. Expiry, tampering, a wrong key and missing
pieces are each answered with AWS's code, status and message, in the protocol's own shape."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from botocore.auth import S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from sqs_clients import REGION, query_sqs_client, signing_at, sqs_client, write_query_model

NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"


@pytest.fixture(scope="session")
def query_data(tmp_path_factory):
    return write_query_model(tmp_path_factory.mktemp("botocore-data"))


@pytest.fixture
def credential(mint):
    return mint("manage")


@pytest.fixture
def queue(gateway, credential):
    client = sqs_client(gateway.url, credential)
    return client, client.create_queue(QueueName="presigned")["QueueUrl"]


@pytest.fixture
def presign(gateway, credential, query_data):
    """presign(operation, params, expires=60, at=None, key=credential, token=None, http="GET") -> a URL a
    Query client presigned."""

    def make(operation: str, params: dict, expires: int = 60, *, at: datetime | None = None, key: dict | None = None,
             token: str | None = None, http: str = "GET") -> str:
        client = query_sqs_client(gateway.url, key or credential, query_data)
        if token:
            client._request_signer._credentials = Credentials(  # a session token, as temporary credentials carry
                (key or credential)["access_key_id"], (key or credential)["secret_access_key"], token)
        with signing_at(at or datetime.now(UTC)):
            return client.generate_presigned_url(operation, Params=params, ExpiresIn=expires, HttpMethod=http)

    return make


def call(url: str, method: str = "GET", headers: dict | None = None) -> tuple[int, dict, str]:
    """(status, headers, body) of a plain HTTP request (a POST's body empty, as the URL holds it all)."""
    request = urllib.request.Request(url, method=method, headers=headers or {},
                                     data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, {k.lower(): v for k, v in refused.headers.items()}, refused.read().decode()


def xml_error(answer: tuple[int, dict, str], status: int, code: str) -> str:
    """The message of a Query (XML) error with that status and code."""
    got_status, headers, body = answer
    assert (got_status, headers["content-type"]) == (status, "text/xml"), body
    assert re.search(r"<Type>Sender</Type><Code>([^<]*)</Code>", body).group(1) == code, body
    return re.search(r"<Message>([^<]*)</Message>", body).group(1)


def with_query(url: str, **changes: str | None) -> str:
    """The URL with query parameters replaced (None: removed), in their places."""
    parts = urlsplit(url)
    pairs = [(k, changes.get(k, v)) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    pairs += [(k, v) for k, v in changes.items() if k not in dict(parse_qsl(parts.query))]
    return parts._replace(query=urlencode([(k, v) for k, v in pairs if v is not None])).geturl()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_presigned_send_receive_and_delete_are_served(presign, queue, method):
    client, url = queue
    attributes = {"colour": {"DataType": "String", "StringValue": "blue"}}
    sent = call(presign("send_message", {"QueueUrl": url, "MessageBody": "hello, presigned",
                                         "MessageAttributes": attributes}, http=method), method)
    assert sent[0] == 200 and sent[1]["content-type"] == "text/xml", sent[2]
    assert "<SendMessageResponse" in sent[2] and "<MessageId>" in sent[2]
    digest = re.search(r"<MD5OfMessageAttributes>(\w+)<", sent[2]).group(1)

    received = call(presign("receive_message", {"QueueUrl": url, "MessageAttributeNames": ["All"]}, http=method),
                    method)
    assert received[0] == 200, received[2]
    assert "<Body>hello, presigned</Body>" in received[2]
    assert f"<MD5OfMessageAttributes>{digest}</MD5OfMessageAttributes>" in received[2]
    handle = re.search(r"<ReceiptHandle>([^<]+)</ReceiptHandle>", received[2]).group(1)
    assert call(presign("delete_message", {"QueueUrl": url, "ReceiptHandle": handle}, http=method), method)[0] == 200
    assert client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                       "ApproximateNumberOfMessagesNotVisible"])["Attributes"] == {
        "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_a_presigned_url_is_served_until_it_expires_and_five_minutes_more(presign, queue):
    """SQS refuses a request "more than 15 minutes after the request expiration date (such as for
    pre-signed URLs)": its own window, five minutes, after X-Amz-Date + X-Amz-Expires."""
    client, url = queue
    now = datetime.now(UTC)
    assert call(presign("get_queue_url", {"QueueName": "presigned"}, 3600, at=now - timedelta(minutes=50)))[0] == 200
    assert call(presign("get_queue_url", {"QueueName": "presigned"}, 60, at=now - timedelta(minutes=3)))[0] == 200
    message = xml_error(call(presign("get_queue_url", {"QueueName": "presigned"}, 60, at=now - timedelta(minutes=7))),
                        400, "RequestExpired")
    assert re.fullmatch(r"Signature expired: \d{8}T\d{6}Z is now earlier than \d{8}T\d{6}Z "
                        r"\(\d{8}T\d{6}Z - 5 min\.\)", message), message
    expired_at = (now - timedelta(minutes=6)).strftime("%Y%m%dT%H%M")  # signed 7 minutes ago, for 60 s
    assert message.startswith(f"Signature expired: {expired_at}")
    week = presign("get_queue_url", {"QueueName": "presigned"}, 604800, at=now - timedelta(days=6))
    assert call(week)[0] == 200


def test_a_presigned_url_dated_in_the_future_is_refused(presign):
    url = presign("list_queues", {}, 3600, at=datetime.now(UTC) + timedelta(minutes=10))
    assert xml_error(call(url), 400, "RequestExpired").startswith("Signature not yet current: ")
    assert call(presign("list_queues", {}, 3600, at=datetime.now(UTC) + timedelta(minutes=4)))[0] == 200


def test_a_tampered_presigned_url_is_refused(presign, queue):
    _, url = queue
    good = presign("send_message", {"QueueUrl": url, "MessageBody": "as signed"})
    signature_mismatch = ("The request signature we calculated does not match the signature you provided. Check your "
                          "AWS Secret Access Key and signing method. Consult the service documentation for details.")
    for tampered in (with_query(good, MessageBody="changed"), with_query(good, DelaySeconds="5"),
                     with_query(good, **{"X-Amz-Expires": "600"}), with_query(good, **{"X-Amz-Expires": None}),
                     with_query(good, **{"X-Amz-Signature": "0" * 64})):
        assert xml_error(call(tampered), 403, "SignatureDoesNotMatch") == signature_mismatch
    assert xml_error(call(good, "POST"), 403, "SignatureDoesNotMatch") == signature_mismatch  # signed for GET
    assert call(good)[0] == 200


def test_a_plus_sign_means_in_the_signature_what_it_means_to_the_action(presign, queue):
    """A query string's `+` is a space to the action (form encoding), so it is a space in the
    signature too: a URL signed for "1+1=2" (`%2B`) with its `%2B` turned into `+` asks for "1 1=2"
    and is refused, as is the reverse; a `+` the signer meant as a space is served as one."""
    client, url = queue
    signed = presign("send_message", {"QueueUrl": url, "MessageBody": "1+1=2"})
    assert "MessageBody=1%2B1%3D2" in signed
    assert xml_error(call(signed.replace("%2B", "+")), 403, "SignatureDoesNotMatch")
    spaced = presign("send_message", {"QueueUrl": url, "MessageBody": "1 1"})
    assert "MessageBody=1%201" in spaced
    assert xml_error(call(spaced.replace("%20", "%2B")), 403, "SignatureDoesNotMatch")
    assert call(spaced.replace("MessageBody=1%201", "MessageBody=1+1"))[0] == 200
    assert call(signed)[0] == 200
    bodies = sorted(m["Body"] for m in client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"])
    assert bodies == ["1 1", "1+1=2"]


def unsigned_payload_url(gateway, credential, params: dict, method: str) -> str:
    """A presigned URL whose signature covers no payload (UNSIGNED-PAYLOAD), as S3's presigner and
    many SigV4 libraries make them (botocore's SQS presigner signs the empty body's hash)."""
    request = AWSRequest(method=method, url=f"{gateway.url}/sqs?{urlencode(params)}")
    S3SigV4QueryAuth(Credentials(credential["access_key_id"], credential["secret_access_key"]), "sqs", REGION,
                     expires=60).add_auth(request)
    assert "X-Amz-Signature=" in request.url
    return request.url


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_unsigned_payload_url_takes_no_parameters_from_a_body(gateway, credential, queue, method):
    """A URL signed with UNSIGNED-PAYLOAD does not cover the body, so a holder of the URL may not add
    parameters there (a delay, attributes) to the request it was given: with a body it is refused."""
    client, url = queue
    signed = unsigned_payload_url(gateway, credential, {"Action": "SendMessage", "QueueUrl": url,
                                                        "MessageBody": "as signed"}, method)
    request = urllib.request.Request(signed, method=method, data=b"DelaySeconds=900",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer = answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read().decode()
    except urllib.error.HTTPError as refused:
        answer = refused.code, {k.lower(): v for k, v in refused.headers.items()}, refused.read().decode()
    assert xml_error(answer, 403, "SignatureDoesNotMatch")
    assert client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])[
        "Attributes"]["ApproximateNumberOfMessagesDelayed"] == "0"
    assert call(signed, method)[0] == 200


def test_a_wrong_key_is_refused(presign, credential):
    wrong_secret = {**credential, "secret_access_key": "w" * 40}
    assert xml_error(call(presign("list_queues", {}, key=wrong_secret)), 403, "SignatureDoesNotMatch")
    unknown = {"access_key_id": "PBSQ" + "Z" * 16, "secret_access_key": "x" * 40}
    assert xml_error(call(presign("list_queues", {}, key=unknown)), 403, "InvalidClientTokenId") == \
        "The security token included in the request is invalid."


def test_a_session_token_is_refused_as_no_credential_has_one(presign):
    url = presign("list_queues", {}, token="FwoGZXIvYXdzEXAMPLE")
    assert "X-Amz-Security-Token=" in url
    assert xml_error(call(url), 403, "InvalidClientTokenId") == "The security token included in the request is invalid."


def test_missing_pieces_are_named(presign):
    url = presign("list_queues", {})
    message = xml_error(call(with_query(url, **{"X-Amz-Credential": None, "X-Amz-Date": None})), 400,
                        "IncompleteSignature")
    assert message == ("AWS query-string parameters must include 'X-Amz-Credential'. AWS query-string parameters "
                       "must include 'X-Amz-Date'. Re-examine the query-string parameters.")
    message = xml_error(call(with_query(url, **{"X-Amz-Signature": ""})), 400, "IncompleteSignature")
    assert message == ("AWS query-string parameters must include 'X-Amz-Signature'. Re-examine the query-string "
                       "parameters.")
    assert xml_error(call(with_query(url, **{"X-Amz-Algorithm": "AWS4-HMAC-SHA512"})), 403,
                     "MissingAuthenticationToken") == "Request is missing Authentication Token"
    assert xml_error(call(with_query(url, **{"X-Amz-Date": "2024-01-01"})), 400, "IncompleteSignature") == \
        "Date must be in ISO-8601 'basic format'. Got '2024-01-01'."


@pytest.mark.parametrize("expires, message", [
    ("0", "X-Amz-Expires must be at least 1 second. Got '0'."),
    ("604801", "X-Amz-Expires must be less than a week (in seconds) that is 604800. Got '604801'."),
    ("soon", "X-Amz-Expires should be a number. Got 'soon'."),
])
def test_x_amz_expires_is_one_second_to_a_week(presign, expires, message):
    url = with_query(presign("list_queues", {}), **{"X-Amz-Expires": expires})
    assert xml_error(call(url), 400, "IncompleteSignature") == message


def test_a_signature_in_both_the_header_and_the_query_string_is_refused(presign, credential):
    url = presign("list_queues", {})
    request = AWSRequest(method="GET", url=url)
    signer = SigV4Auth(Credentials(credential["access_key_id"], credential["secret_access_key"]), "sqs", REGION)
    signer.add_auth(request)
    assert xml_error(call(url, headers=dict(request.headers.items())), 403, "SignatureDoesNotMatch") == \
        "Found both 'X-Amz-Algorithm' as a query-string param and 'Authorization' as HTTP header."


def test_a_json_clients_presigned_url(gateway, credential, queue):
    """Current boto3 (JSON protocol) signs content-type, x-amz-target and x-amzn-query-mode and moves
    the operation's parameters into the URL, where the JSON protocol does not read them: sent with
    its headers, the request is authenticated and its empty body answered as Coral answers one
    (SerializationException, no message); sent bare, its signed headers are missing."""
    _, url = queue
    client = sqs_client(gateway.url, credential)
    presigned = client.generate_presigned_url("send_message", Params={"QueueUrl": url, "MessageBody": "x"})
    assert "X-Amz-SignedHeaders=content-type%3Bhost%3Bx-amz-target%3Bx-amzn-query-mode" in presigned
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage",
               "x-amzn-query-mode": "true"}
    status, answer_headers, body = call(presigned, "POST", headers)
    assert (status, json.loads(body)) == (400, {"__type": "com.amazon.coral.service#SerializationException"})
    assert answer_headers["x-amzn-query-error"] == "MalformedQueryString;Sender"
    with signing_at(datetime.now(UTC) - timedelta(hours=2)):  # for the default hour
        stale = client.generate_presigned_url("send_message", Params={"QueueUrl": url, "MessageBody": "x"})
    status, _, body = call(stale, "POST", headers)
    assert status == 400 and json.loads(body)["__type"] == "com.amazon.coral.service#InvalidSignatureException"
    assert xml_error(call(presigned, "POST"), 403, "SignatureDoesNotMatch")
    assert xml_error(call(presigned), 403, "SignatureDoesNotMatch")
