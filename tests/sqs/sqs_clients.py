"""SQS clients on a gateway, signed with a minted credential: boto3 speaking the JSON protocol, and
botocore speaking the Query protocol; what a test reads of their errors; raw signed requests; and
message attributes of every type with their digests as moto computes them."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlencode

import boto3
import botocore.auth
import botocore.session
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from moto.sqs.models import Message as MotoMessage

from functions.api.sqs.query_model import botocore_model, query_form

REGION = "us-east-1"

ATTRIBUTES = {
    "s": {"DataType": "String", "StringValue": "héllo ✓"},
    "n": {"DataType": "Number", "StringValue": "-12.5e3"},
    "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xffbin"},
    "custom": {"DataType": "String.json", "StringValue": '{"a":1}'},
    "nb": {"DataType": "Number.int", "StringValue": "42"},
    "bc": {"DataType": "Binary.png", "BinaryValue": b"\x89PNG"},
}


def _config(config: dict) -> Config:
    return Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=60, **config)


def sqs_client(gateway_url: str, credential: dict, **config: object):
    return boto3.session.Session().client(
        "sqs", endpoint_url=f"{gateway_url}/sqs", region_name=REGION,
        aws_access_key_id=credential["access_key_id"], aws_secret_access_key=credential["secret_access_key"],
        config=_config(config),
    )


def write_query_model(data_path: Path) -> Path:
    """SQS's model in its Query form under a botocore data path, as an SDK from before 2024 has it."""
    target = data_path / "sqs" / "2012-11-05"
    target.mkdir(parents=True, exist_ok=True)
    (target / "service-2.json").write_text(json.dumps(query_form(botocore_model())))
    return data_path


def query_sqs_client(gateway_url: str, credential: dict, data_path: Path, **config: object):
    """A botocore SQS client that speaks the Query protocol (its model read from `data_path` first)."""
    session = botocore.session.get_session()
    session.get_component("data_loader").search_paths.insert(0, str(data_path))
    client = session.create_client(
        "sqs", endpoint_url=f"{gateway_url}/sqs", region_name=REGION,
        aws_access_key_id=credential["access_key_id"], aws_secret_access_key=credential["secret_access_key"],
        config=_config(config),
    )
    assert client.meta.service_model.protocol == "query"
    return client


def error_of(call, *args, **kwargs) -> ClientError:
    """The ClientError a call raises (the test fails when it raises none)."""
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    return caught.value


def code(e: ClientError) -> str:
    return e.response["Error"]["Code"]


def moto_md5(body: str, attributes: dict) -> tuple[str, str]:
    """(MD5 of body, MD5 of attributes) as moto computes them (its BinaryValue is raw bytes)."""
    m = MotoMessage("x", body)
    m.message_attributes = {k: ({**v, "BinaryValue": v["BinaryValue"]} if "BinaryValue" in v else v)
                            for k, v in attributes.items()}
    return m.body_md5, m.attribute_md5


@dataclass(frozen=True)
class Refusal:
    """What a client reads of an SQS error: the code (over JSON, the one `x-amzn-query-error` names),
    the message, the status, whose fault; over JSON also the `__type`'s name and the header itself."""

    code: str
    message: str
    status: int
    fault: str | None
    json_type: str | None
    query_error: str | None


def refusal(call, *args, **kwargs) -> Refusal:
    """The Refusal of a call (the test fails when the call is served)."""
    response = error_of(call, *args, **kwargs).response
    error, meta = response["Error"], response["ResponseMetadata"]
    return Refusal(error["Code"], error.get("Message", ""), meta["HTTPStatusCode"], error.get("Type"),
                   error.get("QueryErrorCode"), meta["HTTPHeaders"].get("x-amzn-query-error"))


def signed(gateway_url: str, credential: dict, *, target: str | None = None, form: dict | None = None,
           body: dict | None = None, method: str = "POST", path: str = "/sqs") -> httpx.Response:
    """A raw SigV4-signed request to the SQS endpoint: JSON (`target` names the action) or a Query form,
    so a test reads the bytes SQS's shapes are made of."""
    url = f"{gateway_url}{path}"
    if target is not None:
        request = AWSRequest(method=method, url=url, data=json.dumps(body or {}).encode(), headers={
            "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{target}"})
    elif method == "GET":
        request = AWSRequest(method="GET", url=f"{url}?{urlencode(form or {}, quote_via=quote)}" if form else url)
    else:
        request = AWSRequest(method="POST", url=url, data=urlencode(form or {}, quote_via=quote).encode(),
                             headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    keys = Credentials(credential["access_key_id"], credential["secret_access_key"])
    SigV4Auth(keys, "sqs", REGION).add_auth(request)
    return httpx.request(method, request.url, content=request.body or None, headers=dict(request.headers.items()),
                         timeout=30)


def refused_alike(both, method: str, code: str, message: str, *, query_message: str | None = None,
                  status: int = 400, json_type: str | None = None, **kwargs) -> None:
    """The same call, made over JSON and over Query, refused as SQS refuses it in each: the code the
    SDK reads, the status, whose fault, and the wording (the Query protocol's, where it differs)."""
    over_json, over_query = (refusal(getattr(client, method), **kwargs) for client in both)
    assert (over_json.code, over_json.message, over_json.status) == (code, message, status)
    assert over_json.query_error == f"{code};Sender"
    if json_type is not None:
        assert over_json.json_type == json_type
    assert (over_query.code, over_query.message, over_query.status, over_query.fault) == \
        (code, query_message or message, status, "Sender")

@contextmanager
def signing_at(at: datetime):
    """botocore signs (headers or a presigned URL) as of `at` rather than now."""
    real = botocore.auth.get_current_datetime
    utc = at.astimezone(UTC)
    botocore.auth.get_current_datetime = lambda remove_tzinfo=True: utc.replace(tzinfo=None) if remove_tzinfo else utc
    try:
        yield
    finally:
        botocore.auth.get_current_datetime = real
