"""Answers SQS gives that an emulator (moto) words or numbers otherwise, held to what SQS itself
answers: its service model (the status each modelled error has) and answers recorded against SQS.
Each in both protocols (boto3 speaking JSON, botocore speaking Query)."""

from __future__ import annotations

import pytest
from sqs_clients import refusal, refused_alike

VALUE = "InvalidParameterValue"


@pytest.fixture
def queue(both):
    return both[0].create_queue(QueueName="recorded")["QueueUrl"]


def test_a_receipt_handle_never_issued_is_answered_404(both, queue):
    """SQS's model gives ReceiptHandleIsInvalid HTTP 404 (and SQS answers a made-up handle so);
    a handle SQS issued that no longer serves stays a 400 InvalidParameterValue."""
    message = 'The input receipt handle "garbage" is not a valid receipt handle.'
    refused_alike(both, "delete_message", "ReceiptHandleIsInvalid", message, status=404,
                  json_type="ReceiptHandleIsInvalid", QueueUrl=queue, ReceiptHandle="garbage")
    refused_alike(both, "change_message_visibility", "ReceiptHandleIsInvalid", message, status=404,
                  QueueUrl=queue, ReceiptHandle="garbage", VisibilityTimeout=5)
    json_client = both[0]
    json_client.send_message(QueueUrl=queue, MessageBody="x")
    (got,) = json_client.receive_message(QueueUrl=queue)["Messages"]
    json_client.delete_message(QueueUrl=queue, ReceiptHandle=got["ReceiptHandle"])
    gone = refusal(json_client.change_message_visibility, QueueUrl=queue, ReceiptHandle=got["ReceiptHandle"],
                   VisibilityTimeout=5)
    assert (gone.code, gone.status) == (VALUE, 400)
    for client in both:  # in a batch, a failed entry of a 200 answer
        answer = client.delete_message_batch(QueueUrl=queue, Entries=[{"Id": "a", "ReceiptHandle": "garbage"}])
        assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert [(f["Id"], f["Code"], f["Message"]) for f in answer["Failed"]] == [
            ("a", "ReceiptHandleIsInvalid", message)]


def test_a_message_attribute_of_no_known_type_is_worded_as_sqs_words_it(both, queue):
    for data_type in ("InvalidType", "string", ""):
        refused_alike(both, "send_message", VALUE,
                      "The type of message (user) attribute 'invalidAttribute' is invalid. You must use only the "
                      "following supported type prefixes: Binary, Number, String.", QueueUrl=queue,
                      MessageBody="x", MessageAttributes={"invalidAttribute": {"DataType": data_type,
                                                                                "StringValue": "value"}})
    for client in both:  # an entry of a batch fails alone, with the same words
        answer = client.send_message_batch(QueueUrl=queue, Entries=[
            {"Id": "bad", "MessageBody": "x", "MessageAttributes": {"a": {"DataType": "Foo", "StringValue": "v"}}},
            {"Id": "good", "MessageBody": "y"}])
        assert [e["Id"] for e in answer["Successful"]] == ["good"]
        assert answer["Failed"] == [{"Id": "bad", "SenderFault": True, "Code": VALUE, "Message": (
            "The type of message (user) attribute 'a' is invalid. You must use only the following supported type "
            "prefixes: Binary, Number, String.")}]


def test_a_tag_key_outside_1_to_128_characters(both, queue):
    for key in ("", "k" * 129):
        refused_alike(both, "tag_queue", VALUE, "Tag keys must be between 1 and 128 characters in length.",
                      QueueUrl=queue, Tags={key: "production"})
    both[0].tag_queue(QueueUrl=queue, Tags={"k" * 128: "v" * 256})
    assert both[1].list_queue_tags(QueueUrl=queue)["Tags"] == {"k" * 128: "v" * 256}


def test_a_batch_entry_with_an_empty_body_fails_alone_as_an_empty_value(both, queue):
    for client in both:
        answer = client.send_message_batch(QueueUrl=queue, Entries=[{"Id": "1", "MessageBody": "Valid message"},
                                                                    {"Id": "2", "MessageBody": ""}])
        assert [e["Id"] for e in answer["Successful"]] == ["1"]
        assert [(f["Id"], f["Code"], f["SenderFault"]) for f in answer["Failed"]] == [("2", "EmptyValue", True)]
