"""SQS clients on a gateway, signed with a minted credential: boto3 speaking the JSON protocol, and
botocore speaking the Query protocol; what a test reads of their errors; and message attributes of
every type with their digests as moto computes them."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import boto3
import botocore.auth
import botocore.session
import pytest
from botocore.config import Config
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
