"""SQS's queue actions through boto3 over HTTP: create (idempotent, conflicting attributes), URLs,
listing with a prefix and pages, attributes, purge, tags, delete; and one set of queues: the queues
API sees a queue made through SQS and SQS reaches one made through the queues API."""

from __future__ import annotations

import json

import pytest
from sqs_clients import code, error_of

from support.http import client
from support.interleaved import answers_at_once


def test_create_get_url_and_create_again(sqs):
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert url.startswith(f"{sqs.gateway_url}/sqs/") and url.endswith("/orders")
    account = url.split("/")[-2]
    assert len(account) == 12 and account.isdigit()
    assert sqs.get_queue_url(QueueName="orders")["QueueUrl"] == url
    assert sqs.create_queue(QueueName="orders")["QueueUrl"] == url  # same attributes: the same queue
    assert sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "30"})["QueueUrl"] == url
    e = error_of(sqs.create_queue, QueueName="orders", Attributes={"VisibilityTimeout": "5"})
    assert code(e) == "QueueAlreadyExists" and e.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert sqs.get_queue_url(QueueName="orders", QueueOwnerAWSAccountId=account)["QueueUrl"] == url


def test_creates_of_one_queue_racing_each_other_all_get_its_url(sqs):
    """CreateQueue is idempotent for the same attributes however the calls interleave: requests that
    look for the name at once and all find none each get the one queue's URL, none QueueAlreadyExists."""
    for round_ in range(5):
        name = f"raced-{round_}"
        answers = answers_at_once(
            lambda name=name: sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "45"})["QueueUrl"], 8)
        assert answers == [sqs.get_queue_url(QueueName=name)["QueueUrl"]] * 8, answers


def test_a_missing_queue_answers_as_sqs_does(sqs):
    e = error_of(sqs.get_queue_url, QueueName="nope")
    assert code(e) == "AWS.SimpleQueueService.NonExistentQueue"
    assert e.response["Error"]["QueryErrorCode"] == "QueueDoesNotExist"
    assert e.response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-query-error"] == \
        "AWS.SimpleQueueService.NonExistentQueue;Sender"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=f"{sqs.gateway_url}/sqs/000000000000/nope", MessageBody="x")


def test_a_bare_queue_name_is_taken_as_the_queue_url(sqs):
    """SQS takes a queue's name where a QueueUrl is asked (moto's AWS-verified test sends one)."""
    sqs.create_queue(QueueName="by-name")
    sqs.send_message(QueueUrl="by-name", MessageBody="x")
    got = sqs.get_queue_attributes(QueueUrl="by-name", AttributeNames=["ApproximateNumberOfMessages"])
    assert got["Attributes"] == {"ApproximateNumberOfMessages": "1"}
    assert code(error_of(sqs.send_message, QueueUrl="nope", MessageBody="x")) == \
        "AWS.SimpleQueueService.NonExistentQueue"


def test_every_name_sqs_allows_is_taken_and_the_queues_api_serves_it(sqs, gateway, tenant):
    """SQS's rule (1-80 letters, digits, - and _; a FIFO name's .fifo within the 80), not the queues
    API's narrower one: capitals, a leading digit or _, 80 characters."""
    names = ["MyQueue", "9lives", "_under", "-dash", "a" * 80, "Orders_DLQ-2", "F" * 75 + ".fifo"]
    for name in names:
        attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        assert url.endswith("/" + name) and sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
    sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName="MyQueue")["QueueUrl"], MessageBody="hi")
    with client(gateway.url, tenant.key) as api:
        listed = {q["name"] for q in api.get("/api/v1/queues").json()["queues"]}
        assert set(names) <= listed
        assert api.get("/api/v1/queues/MyQueue").json()["metrics"]["queue_length"] == 1
    for name in ("has space", "dot.ted", "a" * 81, "", ".fifo", "F" * 76 + ".fifo", "q/slash"):
        e = error_of(sqs.create_queue, QueueName=name)
        assert code(e) == "InvalidParameterValue", name
        assert e.response["Error"]["Message"] == \
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length", name
    e = error_of(sqs.create_queue, QueueName="plain", Attributes={"FifoQueue": "true"})
    assert code(e) == "InvalidParameterValue"


def test_list_queues_by_prefix_and_in_pages(sqs):
    names = ["alpha-1", "alpha-2", "alpha-3", "beta-1"]
    urls = {n: sqs.create_queue(QueueName=n)["QueueUrl"] for n in names}
    assert sqs.list_queues()["QueueUrls"] == [urls[n] for n in names]
    assert sqs.list_queues(QueueNamePrefix="alpha")["QueueUrls"] == [urls[n] for n in names[:3]]
    first = sqs.list_queues(QueueNamePrefix="alpha", MaxResults=2)
    assert first["QueueUrls"] == [urls["alpha-1"], urls["alpha-2"]] and first["NextToken"]
    second = sqs.list_queues(QueueNamePrefix="alpha", MaxResults=2, NextToken=first["NextToken"])
    assert second["QueueUrls"] == [urls["alpha-3"]] and "NextToken" not in second
    paged = [u for page in sqs.get_paginator("list_queues").paginate(PaginationConfig={"PageSize": 1})
             for u in page.get("QueueUrls", [])]
    assert paged == [urls[n] for n in names]
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="zzz") or \
        sqs.list_queues(QueueNamePrefix="zzz")["QueueUrls"] == []
    assert code(error_of(sqs.list_queues, MaxResults=1001)) == "InvalidParameterValue"


def test_attributes_read_and_set(sqs):
    url = sqs.create_queue(QueueName="attrs", Attributes={"DelaySeconds": "2", "VisibilityTimeout": "45",
                                                          "MaximumMessageSize": "2048"})["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert got["DelaySeconds"] == "2" and got["VisibilityTimeout"] == "45" and got["MaximumMessageSize"] == "2048"
    assert got["MessageRetentionPeriod"] == "345600" and got["ReceiveMessageWaitTimeSeconds"] == "0"
    assert got["QueueArn"] == f"arn:aws:sqs:us-east-1:{url.split('/')[-2]}:attrs"
    assert got["ApproximateNumberOfMessages"] == "0" and int(got["CreatedTimestamp"]) > 0
    assert "FifoQueue" not in got
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "10", "DelaySeconds": "0"})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"])
    assert got["Attributes"] == {"VisibilityTimeout": "10", "DelaySeconds": "0"}
    assert code(error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"Bogus": "1"})) == "InvalidAttributeName"
    for bad in ({"VisibilityTimeout": "43201"}, {"DelaySeconds": "-1"}, {"MaximumMessageSize": "12"},
                {"ContentBasedDeduplication": "true"}):
        assert code(error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes=bad)) in (
            "InvalidAttributeValue", "InvalidAttributeName")
    # SQS answers a redrive policy it cannot read with InvalidParameterValue
    assert code(error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"RedrivePolicy": "{not json"})) == \
        "InvalidParameterValue"
    assert code(error_of(sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["Nope"])) == "InvalidAttributeName"


def test_purge_and_delete(sqs):
    url = sqs.create_queue(QueueName="purged")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)])
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert counts["Attributes"]["ApproximateNumberOfMessages"] == "5"
    sqs.purge_queue(QueueUrl=url)
    assert "Messages" not in sqs.receive_message(QueueUrl=url) or not sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.delete_queue(QueueUrl=url)
    assert code(error_of(sqs.get_queue_url, QueueName="purged")) == "AWS.SimpleQueueService.NonExistentQueue"
    assert code(error_of(sqs.delete_queue, QueueUrl=url)) == "AWS.SimpleQueueService.NonExistentQueue"


def test_one_purge_per_minute(sqs, database_url):
    """SQS allows one PurgeQueue per queue every 60 seconds: another within them is refused (403
    PurgeQueueInProgress) and purges nothing; once the minute is past, a purge is served again."""
    import psycopg

    url = sqs.create_queue(QueueName="purged-twice")["QueueUrl"]
    other = sqs.create_queue(QueueName="purged-other")["QueueUrl"]
    sqs.purge_queue(QueueUrl=url)
    sqs.send_message(QueueUrl=url, MessageBody="kept")
    refused = error_of(sqs.purge_queue, QueueUrl=url)
    assert code(refused) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    assert refused.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert refused.response["Error"]["Message"] == ("Only one PurgeQueue operation on purged-twice is allowed every 60 "
                                                    "seconds.")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]] == ["kept"]
    sqs.purge_queue(QueueUrl=other)  # the minute is the queue's own
    with psycopg.connect(database_url, autocommit=True) as conn:  # the minute has passed
        conn.execute("UPDATE sqs_purges SET purged_at = purged_at - interval '61 seconds'")
    sqs.purge_queue(QueueUrl=url)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_tags(sqs):
    url = sqs.create_queue(QueueName="tagged", tags={"team": "a"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "a"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "dev", "team": "b"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "b", "env": "dev"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "dev"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["env"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)


def test_one_set_of_queues(sqs, gateway, tenant, mint):
    """A queue made through SQS is a Postbox queue, and one made through the queues API is an SQS queue."""
    url = sqs.create_queue(QueueName="shared-q", Attributes={"VisibilityTimeout": "40"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody='{"n": 1}')
    with client(gateway.url, tenant.key) as api:
        doc = api.get("/api/v1/queues/shared-q").json()
        assert doc["visibility_timeout_sec"] == 40 and doc["metrics"]["queue_length"] == 1
        read = api.post("/api/v1/queues/shared-q/read", json={"qty": 1, "vt": 0}).json()["messages"]
        assert read[0]["message"] == '{"n": 1}'  # the body as SQS sent it: a string
        assert api.post("/api/v1/queues", json={"name": "from-api"}).status_code == 201
        assert api.post("/api/v1/queues/from-api/send", json={"message": {"k": [1, 2]}}).status_code == 201
        assert api.post("/api/v1/queues", json={"name": "x.fifo"}).status_code in (400, 422)
    assert sqs.get_queue_url(QueueName="from-api")["QueueUrl"].endswith("/from-api")
    got = sqs.receive_message(QueueUrl=sqs.get_queue_url(QueueName="from-api")["QueueUrl"])["Messages"][0]
    assert json.loads(got["Body"]) == {"k": [1, 2]}


def test_unknown_parameters_are_refused_by_name(sqs):
    url = sqs.create_queue(QueueName="strict")["QueueUrl"]

    def add_field(request, **kwargs):
        request.data = request.data[:-1] + b',"Surprise":1}'

    sqs.meta.events.register_first("before-sign.sqs.GetQueueAttributes", add_field)
    e = error_of(sqs.get_queue_attributes, QueueUrl=url)
    assert code(e) == "InvalidParameterValue" and "Surprise" in e.response["Error"]["Message"]
