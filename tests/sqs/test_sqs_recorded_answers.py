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
