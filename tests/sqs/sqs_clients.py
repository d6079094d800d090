"""A boto3 SQS client on a gateway, signed with a minted credential."""

from __future__ import annotations

import boto3
from botocore.config import Config

REGION = "us-east-1"


def sqs_client(gateway_url: str, credential: dict, **config: object):
    return boto3.session.Session().client(
        "sqs", endpoint_url=f"{gateway_url}/sqs", region_name=REGION,
        aws_access_key_id=credential["access_key_id"], aws_secret_access_key=credential["secret_access_key"],
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=60, **config),
    )
