"""A boto3 SQS client on a gateway, signed with a minted credential, and what a test reads of its errors."""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

REGION = "us-east-1"


def sqs_client(gateway_url: str, credential: dict, **config: object):
    return boto3.session.Session().client(
        "sqs", endpoint_url=f"{gateway_url}/sqs", region_name=REGION,
        aws_access_key_id=credential["access_key_id"], aws_secret_access_key=credential["secret_access_key"],
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=60, **config),
    )


def error_of(call, *args, **kwargs) -> ClientError:
    """The ClientError a call raises (the test fails when it raises none)."""
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    return caught.value


def code(e: ClientError) -> str:
    return e.response["Error"]["Code"]
