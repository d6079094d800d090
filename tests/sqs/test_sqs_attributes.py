"""Queue attributes as SQS takes and answers them, through boto3 (JSON 1.0) and botocore speaking Query:
the spellings of values SQS reads (booleans in any case, integers with a sign or leading zeros, a
RedrivePolicy's maxReceiveCount as a number or a string), what it refuses (a queue type's attributes
on the other type, a .fifo name without FifoQueue, a name deleted less than a minute ago, SSE-SQS with
a KMS key), and what a queue answers before anything is set (GetQueueAttributes All)."""

from __future__ import annotations

import json

import psycopg
import pytest
from sqs_clients import code, error_of, sqs_client

STANDARD_DEFAULTS = {
    "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesDelayed": "0",
    "ApproximateNumberOfMessagesNotVisible": "0", "DelaySeconds": "0", "MaximumMessageSize": "1048576",
    "MessageRetentionPeriod": "345600", "ReceiveMessageWaitTimeSeconds": "0", "SqsManagedSseEnabled": "true",
    "VisibilityTimeout": "30",
}
FIFO_DEFAULTS = {**STANDARD_DEFAULTS, "ContentBasedDeduplication": "false", "DeduplicationScope": "queue",
                 "FifoQueue": "true", "FifoThroughputLimit": "perQueue"}
FIFO = {"FifoQueue": "true"}


def _all(client, url: str) -> dict[str, str]:
    return client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def _error(client, call, **kwargs) -> tuple[str, str]:
    e = error_of(getattr(client, call), **kwargs)
    return code(e), e.response["Error"]["Message"]


# ---- values, as SQS reads them -------------------------------------------------------------------


def test_booleans_in_any_case_are_answered_lowercase(any_sqs):
    url = any_sqs.create_queue(QueueName="bools.fifo", Attributes={
        "FifoQueue": "True", "ContentBasedDeduplication": "True", "SqsManagedSseEnabled": "FALSE"})["QueueUrl"]
    got = _all(any_sqs, url)
    assert (got["FifoQueue"], got["ContentBasedDeduplication"], got["SqsManagedSseEnabled"]) == ("true", "true",
                                                                                                 "false")
    # the same queue asked for again, in another spelling, is the same queue (no QueueNameExists)
    assert any_sqs.create_queue(QueueName="bools.fifo", Attributes={
        "FifoQueue": "TRUE", "ContentBasedDeduplication": "true", "SqsManagedSseEnabled": "False"})["QueueUrl"] == url
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "False",
                                                           "SqsManagedSseEnabled": "tRUE"})
    got = _all(any_sqs, url)
    assert (got["ContentBasedDeduplication"], got["SqsManagedSseEnabled"]) == ("false", "true")
    # content-based deduplication as set in capitals works on a send
    content = any_sqs.create_queue(QueueName="content.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "True"})["QueueUrl"]
    assert any_sqs.send_message(QueueUrl=content, MessageBody="x", MessageGroupId="g")["MessageId"]
    for bad in ("yes", "1", "", "truee"):
        assert _error(any_sqs, "set_queue_attributes", QueueUrl=url, Attributes={"ContentBasedDeduplication": bad}) == (
            "InvalidAttributeValue", "Invalid value for the parameter ContentBasedDeduplication.")


def test_integers_as_sqs_parses_them(any_sqs):
    url = any_sqs.create_queue(QueueName="numbers", Attributes={"DelaySeconds": "+5", "VisibilityTimeout": "045",
                                                                 "MessageRetentionPeriod": "0600"})["QueueUrl"]
    got = _all(any_sqs, url)
    assert (got["DelaySeconds"], got["VisibilityTimeout"], got["MessageRetentionPeriod"]) == ("5", "45", "600")
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"ReceiveMessageWaitTimeSeconds": "-0"})
    assert _all(any_sqs, url)["ReceiveMessageWaitTimeSeconds"] == "0"
    for bad in (" 5", "5 ", "5.0", "1_0", "", "five", "1e1"):
        assert code(error_of(any_sqs.set_queue_attributes, QueueUrl=url, Attributes={"DelaySeconds": bad})) == \
            "InvalidAttributeValue", repr(bad)


@pytest.mark.parametrize("count", [5, "5", "005"])
def test_a_redrive_policy_takes_max_receive_count_as_a_number_or_a_string(any_sqs, count):
    dlq = any_sqs.create_queue(QueueName="parked")["QueueUrl"]
    arn = _all(any_sqs, dlq)["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": count})
    url = any_sqs.create_queue(QueueName="source", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    assert json.loads(_all(any_sqs, url)["RedrivePolicy"]) == {"deadLetterTargetArn": arn, "maxReceiveCount": 5}
    assert any_sqs.create_queue(QueueName="source", Attributes={"RedrivePolicy": policy})["QueueUrl"] == url
    other = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 6})
    assert _error(any_sqs, "create_queue", QueueName="source", Attributes={"RedrivePolicy": other}) == (
        "QueueAlreadyExists", "A queue already exists with the same name and a different value for attribute "
                              "RedrivePolicy")
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert "RedrivePolicy" not in _all(any_sqs, url)


def test_a_redrive_policy_sqs_cannot_read_is_an_invalid_parameter_value(any_sqs):
    url = any_sqs.create_queue(QueueName="source")["QueueUrl"]
    arn = _all(any_sqs, any_sqs.create_queue(QueueName="parked")["QueueUrl"])["QueueArn"]
    for policy, reason in (
            ("{not json", "Redrive policy is not a dict or valid json."),
            (json.dumps({"deadLetterTargetArn": arn}), "Redrive policy does not contain mandatory attribute: "
                                                       "maxReceiveCount."),
            (json.dumps({"MaxReceiveCount": "4", "DeadLetterTargetArn": arn}),
             "Redrive policy does not contain mandatory attribute: deadLetterTargetArn."),
            (json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 0}),
             "Invalid value for maxReceiveCount: 0, valid values are from 1 to 1000 both inclusive."),
            (json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1001"}),
             "Invalid value for maxReceiveCount: 1001, valid values are from 1 to 1000 both inclusive."),
            (json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "invalid"}),
             "Invalid value for maxReceiveCount: invalid, valid values are from 1 to 1000 both inclusive.")):
        assert _error(any_sqs, "set_queue_attributes", QueueUrl=url, Attributes={"RedrivePolicy": policy}) == (
            "InvalidParameterValue", f"Value {policy} for parameter RedrivePolicy is invalid. Reason: {reason}")


# ---- what SQS refuses ------------------------------------------------------------------------------


def test_a_fifo_queue_is_named_dot_fifo_and_made_with_fifo_queue_true(any_sqs):
    any_sqs_name_rule = "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
    assert _error(any_sqs, "create_queue", QueueName="jobs.fifo") == ("InvalidParameterValue", any_sqs_name_rule)
    assert _error(any_sqs, "create_queue", QueueName="jobs.fifo", Attributes={"FifoQueue": "false"}) == (
        "InvalidParameterValue", any_sqs_name_rule)
    assert _error(any_sqs, "create_queue", QueueName="jobs", Attributes={"FifoQueue": "true"}) == (
        "InvalidParameterValue", "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
                                 "underscores, must end with .fifo suffix and be 1 to 80 in length.")
    assert _error(any_sqs, "create_queue", QueueName="jobs", Attributes={"FifoQueue": "false"}) == (
        "InvalidAttributeName", "Unknown Attribute FifoQueue.")
    assert not any_sqs.list_queues().get("QueueUrls")


def test_fifo_attributes_on_a_standard_queue_are_refused(any_sqs):
    for call, kwargs in (("create_queue", {"QueueName": "plain"}),
                         ("set_queue_attributes", {"QueueUrl": any_sqs.create_queue(QueueName="std")["QueueUrl"]})):
        assert _error(any_sqs, call, **kwargs, Attributes={"ContentBasedDeduplication": "false"}) == (
            "InvalidAttributeName", "Unknown Attribute ContentBasedDeduplication.")
        for name, value in (("DeduplicationScope", "queue"), ("FifoThroughputLimit", "perQueue")):
            assert _error(any_sqs, call, **kwargs, Attributes={name: value}) == (
                "InvalidAttributeName", f"You can specify the {name} only when FifoQueue is set to true.")
        assert _error(any_sqs, call, **kwargs, Attributes={"FifoQueue": "true" if call != "create_queue" else
                                                           "false"}) == ("InvalidAttributeName",
                                                                         "Unknown Attribute FifoQueue.")


def test_a_queues_type_cannot_change(any_sqs):
    url = any_sqs.create_queue(QueueName="typed.fifo", Attributes=FIFO)["QueueUrl"]
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "true"})  # what it is: taken
    assert _error(any_sqs, "set_queue_attributes", QueueUrl=url, Attributes={"FifoQueue": "false"}) == (
        "InvalidAttributeValue", "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not "
                                 "supported.")
    for name, value in (("DeduplicationScope", "group"), ("FifoThroughputLimit", "perGroup")):
        assert _error(any_sqs, "set_queue_attributes", QueueUrl=url, Attributes={name: value}) == (
            "InvalidAttributeValue", f"Invalid value for the parameter {name}.")


def test_create_again_with_other_attributes_names_the_first_that_differs(any_sqs):
    url = any_sqs.create_queue(QueueName="twice", Attributes={"ReceiveMessageWaitTimeSeconds": "1",
                                                               "DelaySeconds": "1"})["QueueUrl"]
    assert any_sqs.create_queue(QueueName="twice")["QueueUrl"] == url
    assert any_sqs.create_queue(QueueName="twice", Attributes={"DelaySeconds": "1"})["QueueUrl"] == url
    e = error_of(any_sqs.create_queue, QueueName="twice", Attributes={"ReceiveMessageWaitTimeSeconds": "1",
                                                                       "DelaySeconds": "2"})
    assert (code(e), e.response["Error"]["Message"], e.response["ResponseMetadata"]["HTTPStatusCode"]) == (
        "QueueAlreadyExists", "A queue already exists with the same name and a different value for attribute "
                              "DelaySeconds", 400)
    if any_sqs.protocol == "json":
        assert e.response["Error"]["QueryErrorCode"] == "QueueNameExists"
    fifo = any_sqs.create_queue(QueueName="twice.fifo", Attributes={**FIFO, "ContentBasedDeduplication": "true"})
    assert _error(any_sqs, "create_queue", QueueName="twice.fifo", Attributes={
        **FIFO, "ContentBasedDeduplication": "false"})[1].endswith("attribute ContentBasedDeduplication")
    assert any_sqs.create_queue(QueueName="twice.fifo", Attributes=FIFO)["QueueUrl"] == fifo["QueueUrl"]


def test_a_name_is_free_again_a_minute_after_its_deletion(any_sqs, database_url, gateway, mint, make_tenant):
    url = any_sqs.create_queue(QueueName="gone", Attributes={"DelaySeconds": "3"})["QueueUrl"]
    other = any_sqs.create_queue(QueueName="kept")["QueueUrl"]
    any_sqs.delete_queue(QueueUrl=url)
    e = error_of(any_sqs.create_queue, QueueName="gone")
    assert (code(e), e.response["Error"]["Message"], e.response["ResponseMetadata"]["HTTPStatusCode"]) == (
        "AWS.SimpleQueueService.QueueDeletedRecently",
        "You must wait 60 seconds after deleting a queue before you can create another with the same name.", 400)
    if any_sqs.protocol == "json":
        assert e.response["Error"]["QueryErrorCode"] == "QueueDeletedRecently"
        assert e.response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-query-error"] == \
            "AWS.SimpleQueueService.QueueDeletedRecently;Sender"
    assert code(error_of(any_sqs.get_queue_url, QueueName="gone")) == "AWS.SimpleQueueService.NonExistentQueue"
    assert any_sqs.create_queue(QueueName="kept")["QueueUrl"] == other  # an existing queue is answered as before
    # another tenant's or project's queue of the name is another queue: its deletion holds no name here
    for credential in (mint("manage", tenant_id=make_tenant().tenant_id), mint("manage", project="other")):
        elsewhere = sqs_client(gateway.url, credential)
        elsewhere.delete_queue(QueueUrl=elsewhere.create_queue(QueueName="shared-name")["QueueUrl"])
        assert code(error_of(elsewhere.create_queue, QueueName="shared-name")) == \
            "AWS.SimpleQueueService.QueueDeletedRecently"
    assert any_sqs.create_queue(QueueName="shared-name")["QueueUrl"].endswith("/shared-name")
    with psycopg.connect(database_url, autocommit=True) as conn:  # the minute has passed
        conn.execute("UPDATE sqs_deleted_queues SET deleted_at = deleted_at - interval '61 seconds'")
    url = any_sqs.create_queue(QueueName="gone")["QueueUrl"]
    assert _all(any_sqs, url)["DelaySeconds"] == "0"  # a new queue


# ---- what a queue answers before anything is set ---------------------------------------------------


def _without_times(got: dict[str, str]) -> dict[str, str]:
    assert int(got.pop("CreatedTimestamp")) > 0 and int(got.pop("LastModifiedTimestamp")) > 0
    assert got.pop("QueueArn").startswith("arn:aws:sqs:us-east-1:")
    return got


def test_every_default_sqs_answers(any_sqs):
    assert _without_times(_all(any_sqs, any_sqs.create_queue(QueueName="fresh")["QueueUrl"])) == STANDARD_DEFAULTS
    fifo = any_sqs.create_queue(QueueName="fresh.fifo", Attributes=FIFO)["QueueUrl"]
    assert _without_times(_all(any_sqs, fifo)) == FIFO_DEFAULTS
    picked = any_sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=[
        "SqsManagedSseEnabled", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "Policy", "RedrivePolicy"])
    assert picked["Attributes"] == {"SqsManagedSseEnabled": "true"}


def test_kms_attributes_appear_only_when_a_key_is_set(any_sqs):
    url = any_sqs.create_queue(QueueName="sealed")["QueueUrl"]
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "testKeyId",
                                                           "KmsDataKeyReusePeriodSeconds": "6000"})
    got = _without_times(_all(any_sqs, url))
    assert got == {**STANDARD_DEFAULTS, "KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000",
                   "SqsManagedSseEnabled": "false"}
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsMasterKeyId": "", "KmsDataKeyReusePeriodSeconds": "300"})
    assert _without_times(_all(any_sqs, url)) == {**STANDARD_DEFAULTS, "SqsManagedSseEnabled": "false"}
    # a period alone is kept for a key to come, and shown with it
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"KmsDataKeyReusePeriodSeconds": "120"})
    assert "KmsDataKeyReusePeriodSeconds" not in _all(any_sqs, url)
    made = any_sqs.create_queue(QueueName="sealed-early", Attributes={"KmsMasterKeyId": "alias/aws/sqs"})["QueueUrl"]
    got = any_sqs.get_queue_attributes(QueueUrl=made, AttributeNames=[
        "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled"])["Attributes"]
    assert got == {"KmsMasterKeyId": "alias/aws/sqs", "KmsDataKeyReusePeriodSeconds": "300",
                   "SqsManagedSseEnabled": "false"}
    any_sqs.set_queue_attributes(QueueUrl=made, Attributes={"SqsManagedSseEnabled": "true"})  # SSE-SQS instead
    got = any_sqs.get_queue_attributes(QueueUrl=made, AttributeNames=["All"])["Attributes"]
    assert got["SqsManagedSseEnabled"] == "true" and "KmsMasterKeyId" not in got


def test_sse_sqs_and_a_kms_key_together_are_refused(any_sqs):
    url = any_sqs.create_queue(QueueName="both")["QueueUrl"]
    message = ("You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or "
               "SQS SSE.")
    both = {"KmsMasterKeyId": "testKeyId", "SqsManagedSseEnabled": "true"}
    assert _error(any_sqs, "set_queue_attributes", QueueUrl=url, Attributes=both) == ("InvalidAttributeName", message)
    assert _error(any_sqs, "create_queue", QueueName="both-new", Attributes=both) == ("InvalidAttributeName", message)
    assert _all(any_sqs, url)["SqsManagedSseEnabled"] == "true"


def test_a_policy_is_a_json_document(any_sqs):
    url = any_sqs.create_queue(QueueName="policed")["QueueUrl"]
    assert _error(any_sqs, "set_queue_attributes", QueueUrl=url, Attributes={"Policy": "{nope"}) == (
        "InvalidAttributeValue", "Invalid value for the parameter Policy.")
    policy = json.dumps({"Version": "2012-10-17", "Statement": []})
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
    assert _all(any_sqs, url)["Policy"] == policy
    any_sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    assert "Policy" not in _all(any_sqs, url)
