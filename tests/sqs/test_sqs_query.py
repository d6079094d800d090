"""SQS's older Query protocol, as SDKs from before 2024 speak it: a botocore client whose SQS model
is the Query one (form parameters, XML answers) drives every action family against the local
gateway, and raw requests pin the wire: the parameter names those SDKs send, the XML SQS answers,
GET, and the errors."""

from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import quote, urlencode

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from sqs_clients import ATTRIBUTES, REGION, code, error_of, moto_md5, query_sqs_client

NS = "http://queue.amazonaws.com/doc/2012-11-05/"
FORM = "application/x-www-form-urlencoded; charset=utf-8"


@pytest.fixture
def credential(mint):
    return mint("manage")


@pytest.fixture
def qsqs(gateway, credential, query_data):
    """A botocore SQS client of a fresh tenant speaking Query, with what it sent last in `sent`."""
    client = query_sqs_client(gateway.url, credential, query_data)
    client.sent = []
    client.meta.events.register("before-send.sqs", lambda request, **_: client.sent.append(request))
    return client


def form(url: str, credential: dict, params: list[tuple[str, str]] | dict, *, method: str = "POST",
         secret: str | None = None) -> httpx.Response:
    """A SigV4-signed Query request, its parameters in a form body (POST) or the query string (GET)."""
    encoded = urlencode(params, quote_via=quote)
    if method == "POST":
        request = AWSRequest(method="POST", url=url, data=encoded.encode(), headers={"Content-Type": FORM})
    else:
        request = AWSRequest(method="GET", url=f"{url}?{encoded}")
    SigV4Auth(Credentials(credential["access_key_id"], secret or credential["secret_access_key"]), "sqs",
              REGION).add_auth(request)
    return httpx.request(method, request.url, content=request.body or None, headers=dict(request.headers.items()),
                         timeout=30)


def body_of(sent) -> str:
    return sent.body.decode() if isinstance(sent.body, bytes) else sent.body


def test_queues_and_their_attributes_and_tags(qsqs):
    created = qsqs.create_queue(QueueName="q-orders", Attributes={"VisibilityTimeout": "45", "DelaySeconds": "1"},
                                tags={"team": "billing", "env": "dev"})
    url = created["QueueUrl"]
    assert "Attribute.1.Name=VisibilityTimeout" in body_of(qsqs.sent[-1])  # the names older SDKs send
    assert "Tag.1.Key=team" in body_of(qsqs.sent[-1])
    assert created["ResponseMetadata"]["RequestId"]
    qsqs.create_queue(QueueName="q-other")
    assert qsqs.get_queue_url(QueueName="q-orders")["QueueUrl"] == url
    assert sorted(qsqs.list_queues()["QueueUrls"]) == sorted([url, url.replace("q-orders", "q-other")])
    assert qsqs.list_queues(QueueNamePrefix="q-or")["QueueUrls"] == [url]
    assert "QueueUrls" not in qsqs.list_queues(QueueNamePrefix="none-")

    attributes = qsqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "45" and attributes["DelaySeconds"] == "1"
    assert attributes["QueueArn"].endswith(":q-orders")
    assert "AttributeName.1=All" in body_of(qsqs.sent[-1])
    qsqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "10", "MaximumMessageSize": "2048"})
    picked = qsqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "MaximumMessageSize"])
    assert picked["Attributes"] == {"VisibilityTimeout": "10", "MaximumMessageSize": "2048"}

    assert qsqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "billing", "env": "dev"}
    qsqs.tag_queue(QueueUrl=url, Tags={"owner": "ana"})
    qsqs.untag_queue(QueueUrl=url, TagKeys=["env", "team"])
    assert "TagKey.2=team" in body_of(qsqs.sent[-1])
    assert qsqs.list_queue_tags(QueueUrl=url)["Tags"] == {"owner": "ana"}

    qsqs.send_message(QueueUrl=url, MessageBody="to purge", DelaySeconds=0)
    qsqs.purge_queue(QueueUrl=url)
    assert qsqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"] == "0"
    qsqs.delete_queue(QueueUrl=url)
    assert code(error_of(qsqs.get_queue_url, QueueName="q-orders")) == "AWS.SimpleQueueService.NonExistentQueue"


def test_send_and_receive_with_every_attribute_type_and_their_digests(qsqs):
    url = qsqs.create_queue(QueueName="typed")["QueueUrl"]
    body = "line\r\nbreak & <xml/> ]]> ünïcode 🎉\ttab"  # \r travels as &#xD; so the body's digest holds
    sent = qsqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=ATTRIBUTES,
                             MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String",
                                                                         "StringValue": "Root=1-abc"}})
    wire = body_of(qsqs.sent[-1])
    for name in ("MessageAttribute.1.Name=", "MessageAttribute.1.Value.DataType=",
                 "MessageAttribute.1.Value.StringValue=", "MessageAttribute.3.Value.BinaryValue=",
                 "MessageSystemAttribute.1.Name=AWSTraceHeader"):
        assert name in wire, wire
    body_md5, attributes_md5 = moto_md5(body, ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == body_md5 and sent["MD5OfMessageAttributes"] == attributes_md5
    assert sent["MD5OfMessageSystemAttributes"] and sent["MessageId"]

    (m,) = qsqs.receive_message(QueueUrl=url, AttributeNames=["All"], MessageAttributeNames=["All"],
                                MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert m["Body"] == body and m["MD5OfBody"] == body_md5 == hashlib.md5(body.encode()).hexdigest()
    assert m["MessageId"] == sent["MessageId"] and m["ReceiptHandle"]
    assert m["MessageAttributes"] == ATTRIBUTES and m["MD5OfMessageAttributes"] == attributes_md5
    attrs = m["Attributes"]
    assert attrs["ApproximateReceiveCount"] == "1" and attrs["AWSTraceHeader"] == "Root=1-abc"
    assert int(attrs["SentTimestamp"]) > 0 and attrs["SenderId"]

    qsqs.send_message(QueueUrl=url, MessageBody="picked", MessageAttributes={
        "keep": {"DataType": "String", "StringValue": "k"}, "drop": {"DataType": "Number", "StringValue": "1"}})
    (p,) = qsqs.receive_message(QueueUrl=url, MessageAttributeNames=["keep"],
                                MessageSystemAttributeNames=["SentTimestamp"])["Messages"]
    assert "MessageAttributeName.1=keep" in body_of(qsqs.sent[-1])
    assert "MessageSystemAttributeName.1=SentTimestamp" in body_of(qsqs.sent[-1])
    assert p["MessageAttributes"] == {"keep": {"DataType": "String", "StringValue": "k"}}
    assert list(p["Attributes"]) == ["SentTimestamp"]
    assert "Messages" not in qsqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)


def test_batches_with_partial_failures_delete_and_visibility(qsqs):
    url = qsqs.create_queue(QueueName="batched", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    sent = qsqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "one", "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "1"}}},
        {"Id": "b", "MessageBody": "two", "DelaySeconds": 0},
        {"Id": "bad", "MessageBody": "three", "DelaySeconds": 5000},
        {"Id": "c", "MessageBody": "four"},
    ])
    wire = body_of(qsqs.sent[-1])
    assert "SendMessageBatchRequestEntry.1.Id=a" in wire
    assert "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=Number" in wire
    assert sorted(e["Id"] for e in sent["Successful"]) == ["a", "b", "c"]
    assert all(e["MD5OfMessageBody"] and e["MessageId"] for e in sent["Successful"])
    (failed,) = sent["Failed"]
    assert failed["Id"] == "bad" and failed["SenderFault"] is True and failed["Code"] == "InvalidParameterValue"

    messages = []
    while len(messages) < 3:
        got = qsqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        assert got or messages, "nothing received"
        messages += got
    assert sorted(m["Body"] for m in messages) == ["four", "one", "two"]
    by_body = {m["Body"]: m["ReceiptHandle"] for m in messages}

    changed = qsqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "one", "ReceiptHandle": by_body["one"], "VisibilityTimeout": 0},
        {"Id": "junk", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 0}])
    assert "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout=0" in body_of(qsqs.sent[-1])
    assert [e["Id"] for e in changed["Successful"]] == ["one"]
    assert [e["Id"] for e in changed["Failed"]] == ["junk"] and changed["Failed"][0]["SenderFault"] is True
    qsqs.change_message_visibility(QueueUrl=url, ReceiptHandle=by_body["two"], VisibilityTimeout=30)
    (again,) = qsqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert again["Body"] == "one"  # made visible at once; "two" stays hidden

    deleted = qsqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": "one", "ReceiptHandle": again["ReceiptHandle"]}, {"Id": "two", "ReceiptHandle": by_body["two"]},
        {"Id": "junk", "ReceiptHandle": "not-a-handle"}])
    assert "DeleteMessageBatchRequestEntry.2.ReceiptHandle=" in body_of(qsqs.sent[-1])
    assert sorted(e["Id"] for e in deleted["Successful"]) == ["one", "two"]
    assert [e["Id"] for e in deleted["Failed"]] == ["junk"]
    qsqs.delete_message(QueueUrl=url, ReceiptHandle=by_body["four"])
    counts = qsqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    assert counts == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_errors_carry_the_query_codes(qsqs, gateway, credential, query_data):
    missing = error_of(qsqs.get_queue_url, QueueName="nowhere")
    assert code(missing) == "AWS.SimpleQueueService.NonExistentQueue"
    assert missing.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert missing.response["Error"]["Type"] == "Sender"
    url = qsqs.create_queue(QueueName="errs")["QueueUrl"]
    bad = error_of(qsqs.send_message, QueueUrl=url, MessageBody="x", DelaySeconds=5000)
    assert code(bad) == "InvalidParameterValue" and "DelaySeconds" in bad.response["Error"]["Message"]
    assert code(error_of(qsqs.send_message, QueueUrl=url, MessageBody="nul \x00")) == "InvalidMessageContents"
    assert code(error_of(qsqs.send_message_batch, QueueUrl=url, Entries=[])) == \
        "AWS.SimpleQueueService.EmptyBatchRequest"
    forged = query_sqs_client(gateway.url, {**credential, "secret_access_key": "x" * 40}, query_data)
    denied = error_of(forged.list_queues)
    assert code(denied) == "SignatureDoesNotMatch" and denied.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    endpoint = f"{gateway.url}/sqs"
    for params, expected in (({"Action": "NoSuchThing", "Version": "2012-11-05"}, "InvalidAction"),
                             ({"Action": "ListQueues", "Bogus": "1"}, "InvalidParameterValue"),
                             ({"Action": "SendMessage", "QueueUrl": url, "MessageBody": "x",
                               "MessageAttribute.1.Name": "a", "MessageAttribute.1.Value.Colour": "red"},
                              "InvalidParameterValue"),
                             ([("Action", "ListQueues"), ("QueueNamePrefix", "a"), ("QueueNamePrefix", "b")],
                              "InvalidParameterValue"),
                             ({"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName": "All"},
                              "InvalidParameterValue"),  # a list takes numbered entries
                             ({"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.first": "All"},
                              "InvalidParameterValue"),
                             ({"Action": "SendMessage", "QueueUrl": url, "MessageBody": b"\xff"},
                              "InvalidMessageContents"),
                             ({"Action": "SendMessage", "QueueUrl": url, "MessageBody": "x", "DelaySeconds": "soon"},
                              "InvalidParameterValue"),
                             ({"Action": "ListQueues", "Version": "2008-01-01"}, "InvalidParameterValue")):
        answer = form(endpoint, credential, params)
        assert answer.status_code == 400 and f"<Code>{expected}</Code>" in answer.text, answer.text
    assert "Bogus" in form(endpoint, credential, {"Action": "ListQueues", "Bogus": "1"}).text
    assert "MessageAttribute.1.Value.Colour" in form(endpoint, credential, {
        "Action": "SendMessage", "QueueUrl": url, "MessageBody": "x", "MessageAttribute.1.Name": "a",
        "MessageAttribute.1.Value.Colour": "red"}).text


def test_the_xml_of_an_answer_and_of_an_error(gateway, credential):
    endpoint = f"{gateway.url}/sqs"
    created = form(endpoint, credential, {"Action": "CreateQueue", "QueueName": "raw", "Version": "2012-11-05"})
    assert created.status_code == 200 and created.headers["content-type"].startswith("text/xml")
    url = re.search("<QueueUrl>(.*)</QueueUrl>", created.text).group(1)
    body = "a\r\n<b> & c"
    sent = form(url, credential, [("Action", "SendMessage"), ("MessageBody", body), ("Version", "2012-11-05"),
                                  ("MessageAttribute.1.Name", "colour"),
                                  ("MessageAttribute.1.Value.DataType", "String"),
                                  ("MessageAttribute.1.Value.StringValue", "red")])  # to the queue's URL
    assert sent.status_code == 200, sent.text
    request_id = sent.headers["x-amzn-RequestId"]
    message_id = re.search("<MessageId>(.*)</MessageId>", sent.text).group(1)
    attributes_md5 = moto_md5(body, {"colour": {"DataType": "String", "StringValue": "red"}})[1]
    assert sent.text == (
        f'<?xml version="1.0"?><SendMessageResponse xmlns="{NS}"><SendMessageResult>'
        f"<MD5OfMessageBody>{hashlib.md5(body.encode()).hexdigest()}</MD5OfMessageBody>"
        f"<MD5OfMessageAttributes>{attributes_md5}</MD5OfMessageAttributes>"
        f"<MessageId>{message_id}</MessageId></SendMessageResult>"
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></SendMessageResponse>")

    got = form(endpoint, credential, {"Action": "ReceiveMessage", "QueueUrl": url, "AttributeName.1": "All",
                                      "MessageAttributeName.1": "All"}, method="GET")
    assert got.status_code == 200, got.text
    assert "<Body>a&#xD;\n&lt;b&gt; &amp; c</Body>" in got.text
    assert ("<MessageAttribute><Name>colour</Name><Value><StringValue>red</StringValue>"
            "<DataType>String</DataType></Value></MessageAttribute>") in got.text
    assert "<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>" in got.text

    missing = form(endpoint, credential, {"Action": "GetQueueUrl", "QueueName": "<none>"})
    assert missing.status_code == 400 and missing.headers["content-type"].startswith("text/xml")
    assert missing.text == (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{NS}"><Error><Type>Sender</Type>'
        "<Code>AWS.SimpleQueueService.NonExistentQueue</Code><Message>The specified queue does not exist for this "
        "wsdl version."
        f"</Message><Detail/></Error><RequestId>{missing.headers['x-amzn-RequestId']}</RequestId></ErrorResponse>")


def test_get_and_a_query_string_are_signed_and_read(gateway, credential):
    endpoint = f"{gateway.url}/sqs"
    assert form(endpoint, credential, {"Action": "ListQueues"}, method="GET").status_code == 200
    forged = form(endpoint, credential, {"Action": "ListQueues"}, method="GET", secret="y" * 40)
    assert forged.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in forged.text
    signed = AWSRequest(method="GET", url=f"{endpoint}?Action=ListQueues")
    SigV4Auth(Credentials(credential["access_key_id"], credential["secret_access_key"]), "sqs", REGION).add_auth(signed)
    altered = httpx.get(f"{endpoint}?Action=ListQueues&QueueNamePrefix=x", headers=dict(signed.headers.items()))
    assert altered.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in altered.text
    both = AWSRequest(method="POST", url=f"{endpoint}?Action=ListQueues", data=b"QueueNamePrefix=x",
                      headers={"Content-Type": FORM})  # a POST's parameters in its query string and its body
    SigV4Auth(Credentials(credential["access_key_id"], credential["secret_access_key"]), "sqs", REGION).add_auth(both)
    served = httpx.post(both.url, content=both.body, headers=dict(both.headers.items()))
    assert served.status_code == 200 and served.text.startswith('<?xml version="1.0"?><ListQueuesResponse ')



def test_pages_dead_letter_sources_and_move_tasks(qsqs):
    urls = [qsqs.create_queue(QueueName=f"page-{i}")["QueueUrl"] for i in range(3)]
    first = qsqs.list_queues(QueueNamePrefix="page-", MaxResults=2)
    assert first["QueueUrls"] == urls[:2] and first["NextToken"]
    rest = qsqs.list_queues(QueueNamePrefix="page-", MaxResults=2, NextToken=first["NextToken"])
    assert rest["QueueUrls"] == urls[2:] and "NextToken" not in rest

    dlq = qsqs.create_queue(QueueName="dead")["QueueUrl"]
    dlq_arn = qsqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    src = qsqs.create_queue(QueueName="work", Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})})["QueueUrl"]
    assert qsqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]
    qsqs.send_message(QueueUrl=dlq, MessageBody="parked")
    src_arn = qsqs.get_queue_attributes(QueueUrl=src, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert qsqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=src_arn,
                                        MaxNumberOfMessagesPerSecond=5)["TaskHandle"]
    (task,) = qsqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 1
    assert task["MaxNumberOfMessagesPerSecond"] == 5 and isinstance(task["StartedTimestamp"], int)
    assert qsqs.receive_message(QueueUrl=src)["Messages"][0]["Body"] == "parked"
