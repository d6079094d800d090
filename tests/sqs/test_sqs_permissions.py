"""AddPermission and RemovePermission through boto3 (JSON 1.0) and botocore speaking Query: the
statements land in the queue's Policy as SQS writes them (as recorded on SQS: Version 2008-10-17, one
principal or action a string, more a list), labels are unique, and the errors are SQS's. The policy is
stored only: Postbox's own access (credentials and their roles) is unchanged by it."""

from __future__ import annotations

import json

import pytest
from sqs_clients import code, error_of, sqs_client


def _policy(client, url: str) -> dict | None:
    got = client.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    return json.loads(got["Attributes"]["Policy"]) if "Attributes" in got else None


def _error(client, call, **kwargs) -> tuple[str, str, int]:
    e = error_of(getattr(client, call), **kwargs)
    return code(e), e.response["Error"]["Message"], e.response["ResponseMetadata"]["HTTPStatusCode"]


def test_a_permissions_life(any_sqs):
    url = any_sqs.create_queue(QueueName="shared")["QueueUrl"]
    arn = any_sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    account = arn.split(":")[4]
    any_sqs.add_permission(QueueUrl=url, Label="crossaccountpermission", AWSAccountIds=["668614515564", account],
                           Actions=["ReceiveMessage"])
    assert _policy(any_sqs, url) == {
        "Version": "2008-10-17", "Id": f"{arn}/SQSDefaultPolicy",
        "Statement": [{"Sid": "crossaccountpermission", "Effect": "Allow",
                       "Principal": {"AWS": ["arn:aws:iam::668614515564:root", f"arn:aws:iam::{account}:root"]},
                       "Action": "SQS:ReceiveMessage", "Resource": arn}]}
    any_sqs.remove_permission(QueueUrl=url, Label="crossaccountpermission")
    assert _policy(any_sqs, url) is None  # the policy goes with its last statement

    any_sqs.add_permission(QueueUrl=url, Label="first", AWSAccountIds=[account], Actions=["ReceiveMessage"])
    assert _error(any_sqs, "add_permission", QueueUrl=url, Label="first", AWSAccountIds=["668614515564"],
                  Actions=["SendMessage"]) == (
        "InvalidParameterValue", "Value first for parameter Label is invalid. Reason: Already exists.", 400)
    any_sqs.add_permission(QueueUrl=url, Label="second", AWSAccountIds=[account],
                           Actions=["SendMessage", "DeleteMessage", "*"])
    statements = _policy(any_sqs, url)["Statement"]
    assert [s["Sid"] for s in statements] == ["first", "second"]
    assert statements[0]["Principal"] == {"AWS": f"arn:aws:iam::{account}:root"}
    assert statements[1]["Action"] == ["SQS:SendMessage", "SQS:DeleteMessage", "SQS:*"]
    any_sqs.remove_permission(QueueUrl=url, Label="first")
    assert [s["Sid"] for s in _policy(any_sqs, url)["Statement"]] == ["second"]
    any_sqs.remove_permission(QueueUrl=url, Label="second")
    assert _error(any_sqs, "remove_permission", QueueUrl=url, Label="second") == (
        "InvalidParameterValue", "Value second for parameter Label is invalid. Reason: can't find label.", 400)


def test_a_statement_joins_a_policy_set_by_hand(any_sqs):
    url = any_sqs.create_queue(QueueName="by-hand")["QueueUrl"]
    mine = {"Sid": "mine", "Effect": "Deny", "Principal": "*", "Action": "SQS:PurgeQueue", "Resource": "*"}
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps({
        "Version": "2012-10-17", "Id": "custom", "Statement": [mine]})})
    any_sqs.add_permission(QueueUrl=url, Label="added", AWSAccountIds=["111122223333"], Actions=["GetQueueUrl"])
    doc = _policy(any_sqs, url)
    assert doc["Version"] == "2012-10-17" and doc["Id"] == "custom" and doc["Statement"][0] == mine
    assert doc["Statement"][1]["Sid"] == "added"


def test_what_sqs_refuses(any_sqs):
    url = any_sqs.create_queue(QueueName="guarded")["QueueUrl"]
    ok = {"QueueUrl": url, "Label": "l", "AWSAccountIds": ["111122223333"], "Actions": ["SendMessage"]}
    assert _error(any_sqs, "add_permission", **{**ok, "Actions": []}) == (
        "MissingParameter", "The request must contain the parameter Actions.", 400)
    assert _error(any_sqs, "add_permission", **{**ok, "AWSAccountIds": []}) == (
        "InvalidParameterValue", "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify.", 400)
    assert _error(any_sqs, "add_permission", **{**ok, "AWSAccountIds": ["12345"]})[0] == "InvalidParameterValue"
    assert _error(any_sqs, "add_permission", **{**ok, "Actions": [
        "ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes", "GetQueueUrl", "ListDeadLetterSourceQueues",
        "PurgeQueue", "ReceiveMessage", "SendMessage"]}) == (
        "OverLimit", "8 Actions were found, maximum allowed is 7.", 403)
    assert _error(any_sqs, "add_permission", **{**ok, "Actions": ["RemovePermission"]}) == (
        "InvalidParameterValue", "Value SQS:RemovePermission for parameter ActionName is invalid. Reason: Only the "
                                 "queue owner is allowed to invoke this action.", 400)
    assert _error(any_sqs, "add_permission", **{**ok, "Label": "has space"})[0] == "InvalidParameterValue"
    assert _error(any_sqs, "add_permission", **{**ok, "Label": "x" * 81})[0] == "InvalidParameterValue"
    gone = {**ok, "QueueUrl": url.replace("/guarded", "/nope")}
    assert _error(any_sqs, "add_permission", **gone)[0] == "AWS.SimpleQueueService.NonExistentQueue"
    assert _policy(any_sqs, url) is None


@pytest.mark.parametrize("role", ["write", "read"])
def test_only_a_manage_credential_changes_permissions(gateway, mint, role):
    owner = sqs_client(gateway.url, mint("manage"))
    url = owner.create_queue(QueueName="owned")["QueueUrl"]
    other = sqs_client(gateway.url, mint(role))
    assert code(error_of(other.add_permission, QueueUrl=url, Label="l", AWSAccountIds=["111122223333"],
                         Actions=["SendMessage"])) == "AccessDenied"
    assert _policy(owner, url) is None


def test_a_permission_opens_nothing_postbox_guards(gateway, mint):
    """A statement allowing SendMessage to everyone gives a read credential no power to send: Postbox
    decides by the credential's role, and keeps the policy for SQS's clients to read back."""
    owner = sqs_client(gateway.url, mint("manage"))
    url = owner.create_queue(QueueName="closed")["QueueUrl"]
    owner.add_permission(QueueUrl=url, Label="all", AWSAccountIds=["111122223333"], Actions=["*"])
    reader = sqs_client(gateway.url, mint("read"))
    assert code(error_of(reader.send_message, QueueUrl=url, MessageBody="x")) == "AccessDenied"
