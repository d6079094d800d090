"""The AWS CLI (`awscli` from PyPI, as a user runs it) against the local runtime: create, send,
receive, delete and attributes, each command's JSON as the CLI prints it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

AWS = shutil.which("aws", path=str(Path(sys.executable).parent)) or shutil.which("aws")
pytestmark = pytest.mark.skipif(AWS is None, reason="the AWS CLI (awscli, in the dev extra) is not installed")


@pytest.fixture
def aws(gateway, mint, tmp_path):
    credential = mint("manage")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": credential["access_key_id"],
           "AWS_SECRET_ACCESS_KEY": credential["secret_access_key"], "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
           "AWS_PAGER": ""}
    env.pop("AWS_PROFILE", None)

    def run(*args: str, ok: bool = True) -> dict | str:
        done = subprocess.run([AWS, "sqs", *args, "--endpoint-url", f"{gateway.url}/sqs", "--output", "json"],
                              env=env, capture_output=True, text=True, timeout=60)
        if not ok:
            assert done.returncode != 0
            return done.stderr
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else {}

    return run


def test_a_walk_through_with_the_aws_cli(aws):
    url = aws("create-queue", "--queue-name", "cli-walk", "--attributes", "VisibilityTimeout=20")["QueueUrl"]
    assert url.endswith("/cli-walk")
    assert aws("get-queue-url", "--queue-name", "cli-walk")["QueueUrl"] == url
    assert url in aws("list-queues")["QueueUrls"]
    sent = aws("send-message", "--queue-url", url, "--message-body", "hello from the CLI",
               "--message-attributes", json.dumps({"kind": {"DataType": "String", "StringValue": "greeting"}}))
    assert sent["MD5OfMessageBody"] and sent["MessageId"]
    got = aws("receive-message", "--queue-url", url, "--attribute-names", "All", "--message-attribute-names", "All",
              "--wait-time-seconds", "2")["Messages"]
    assert got[0]["Body"] == "hello from the CLI" and got[0]["MessageAttributes"]["kind"]["StringValue"] == "greeting"
    assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1"
    aws("delete-message", "--queue-url", url, "--receipt-handle", got[0]["ReceiptHandle"])
    aws("set-queue-attributes", "--queue-url", url, "--attributes", "DelaySeconds=3")
    attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert attrs["DelaySeconds"] == "3" and attrs["VisibilityTimeout"] == "20"
    assert attrs["ApproximateNumberOfMessages"] == "0"
    aws("delete-queue", "--queue-url", url)
    assert "NonExistentQueue" in aws("get-queue-url", "--queue-name", "cli-walk", ok=False)


def test_attribute_spellings_and_permissions_with_the_aws_cli(aws):
    url = aws("create-queue", "--queue-name", "cli-attrs.fifo", "--attributes",
              "FifoQueue=True,ContentBasedDeduplication=True,DeduplicationScope=messageGroup,"
              "FifoThroughputLimit=perMessageGroupId")["QueueUrl"]
    attrs = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert attrs["FifoQueue"] == attrs["ContentBasedDeduplication"] == attrs["SqsManagedSseEnabled"] == "true"
    for group in ("a", "b", "a"):
        aws("send-message", "--queue-url", url, "--message-body", "same", "--message-group-id", group)
    assert aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "ApproximateNumberOfMessages")[
        "Attributes"]["ApproximateNumberOfMessages"] == "2"
    aws("add-permission", "--queue-url", url, "--label", "partner", "--aws-account-ids", "111122223333",
        "--actions", "SendMessage", "ReceiveMessage")
    policy = json.loads(aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "Policy")[
        "Attributes"]["Policy"])
    assert policy["Statement"][0]["Action"] == ["SQS:SendMessage", "SQS:ReceiveMessage"]
    aws("remove-permission", "--queue-url", url, "--label", "partner")
    assert "can't find label" in aws("remove-permission", "--queue-url", url, "--label", "partner", ok=False)
    assert "InvalidParameterValue" in aws("create-queue", "--queue-name", "cli-plain.fifo", ok=False)
    aws("delete-queue", "--queue-url", url)
    assert "QueueDeletedRecently" in aws("create-queue", "--queue-name", "cli-attrs.fifo", "--attributes",
                                         "FifoQueue=true", ok=False)
