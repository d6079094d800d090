"""SQS's error messages word for word, over both protocols (boto3 speaking JSON, botocore speaking
Query): each refusal carries the code the SDK reads, the HTTP status, whose fault, and the message
as SQS writes it, including where the two protocols word one error apart."""

from __future__ import annotations

import pytest
from sqs_clients import refusal, refused_alike, signed

VALUE = "InvalidParameterValue"
VALUE_TYPE = "InvalidParameterValueException"  # the JSON `__type` SQS names it by
ALLOWED = "#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]"


@pytest.fixture
def queue(both):
    return both[0].create_queue(QueueName="words")["QueueUrl"]


@pytest.fixture
def fifo(both):
    return both[0].create_queue(QueueName="words.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]


def test_a_missing_queue_is_worded_as_each_protocol_words_it(both):
    gone = both[0].create_queue(QueueName="gone")["QueueUrl"]
    both[0].delete_queue(QueueUrl=gone)
    for method, kwargs in (("get_queue_url", {"QueueName": "nowhere"}),
                           ("get_queue_attributes", {"QueueUrl": gone, "AttributeNames": ["All"]}),
                           ("send_message", {"QueueUrl": gone, "MessageBody": "x"}),
                           ("receive_message", {"QueueUrl": gone}),
                           ("delete_queue", {"QueueUrl": gone}),
                           ("list_queue_tags", {"QueueUrl": gone})):
        refused_alike(both, method, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.",
                      query_message="The specified queue does not exist for this wsdl version.",
                      json_type="QueueDoesNotExist", **kwargs)


def test_receive_parameters_out_of_range(both, queue):
    for parameter, value, reason in (("MaxNumberOfMessages", 11, "Must be between 1 and 10, if provided."),
                                     ("MaxNumberOfMessages", 0, "Must be between 1 and 10, if provided."),
                                     ("WaitTimeSeconds", 21, "Must be >= 0 and <= 20, if provided."),
                                     ("WaitTimeSeconds", -1, "Must be >= 0 and <= 20, if provided."),
                                     ("VisibilityTimeout", 43201, "Must be >= 0 and <= 43200, if provided."),
                                     ("VisibilityTimeout", -1, "Must be >= 0 and <= 43200, if provided.")):
        refused_alike(both, "receive_message", VALUE,
                      f"Value {value} for parameter {parameter} is invalid. Reason: {reason}", json_type=VALUE_TYPE,
                      QueueUrl=queue, **{parameter: value})


def test_send_refusals(both, queue):
    refused_alike(both, "send_message", VALUE,
                  "Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.",
                  QueueUrl=queue, MessageBody="x", DelaySeconds=901)
    refused_alike(both, "send_message", "MissingParameter", "The request must contain the parameter MessageBody.",
                  json_type="MissingRequiredParameterException", QueueUrl=queue, MessageBody="")
    refused_alike(both, "send_message", VALUE,
                  "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'.",
                  QueueUrl=queue, MessageBody="x",
                  MessageAttributes={"ErrorDetails": {"DataType": "String", "StringValue": ""}})
    refused_alike(both, "send_message", VALUE,
                  "Message (user) attribute 'n' must contain a non-empty value of type 'Number'.",
                  QueueUrl=queue, MessageBody="x",
                  MessageAttributes={"n": {"DataType": "Number.int", "StringValue": ""}})


def test_a_message_too_long_alone_and_in_a_batch(both):
    url = both[0].create_queue(QueueName="small", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    refused_alike(both, "send_message", VALUE,
                  "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.",
                  QueueUrl=url, MessageBody="a" * 1025)
    for client in both:
        answer = client.send_message_batch(QueueUrl=url, Entries=[{"Id": "fits", "MessageBody": "a" * 1024},
                                                                  {"Id": "long", "MessageBody": "a" * 1025}])
        assert [e["Id"] for e in answer["Successful"]] == ["fits"]
        assert answer["Failed"] == [{"Id": "long", "SenderFault": True, "Code": VALUE, "Message": (
            "One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes.")}]


def test_characters_sqs_refuses_in_a_body_and_in_an_attribute(both, queue):
    refused_alike(both, "send_message", "InvalidMessageContents",
                  f"Invalid binary character '#x1' was found in the message body, the set of allowed characters is "
                  f"{ALLOWED}.", QueueUrl=queue, MessageBody="bell \x01")
    refused_alike(both, "send_message", VALUE,
                  "Invalid binary character '#x8' was found in the value of message (user) attribute 'attr1', the "
                  f"set of allowed characters is {ALLOWED}.", QueueUrl=queue, MessageBody="x",
                  MessageAttributes={"attr1": {"DataType": "String", "StringValue": "back\x08space"}})
    # a NUL over JSON, which the body's parser meets before the action: the same words
    json_client = both[0]
    nul = refusal(json_client.send_message, QueueUrl=queue, MessageBody="nul \x00")
    assert (nul.code, nul.message) == ("InvalidMessageContents", "Invalid binary character '#x0' was found in the "
                                       f"message body, the set of allowed characters is {ALLOWED}.")
    nul = refusal(json_client.send_message, QueueUrl=queue, MessageBody="x",
                  MessageAttributes={"k": {"DataType": "String", "StringValue": "\x00"}})
    assert nul.code == VALUE and "'#x0' was found in the value of message (user) attribute 'k'" in nul.message


def test_group_and_deduplication_ids(both, queue, fifo):
    reason = "can only include alphanumeric and punctuation characters. 1 to 128 in length."
    for value in ("", "group 123", "a" * 129):
        refused_alike(both, "send_message", VALUE,
                      f"Value {value} for parameter MessageGroupId is invalid. Reason: MessageGroupId {reason}",
                      QueueUrl=queue, MessageBody="x", MessageGroupId=value)
        refused_alike(both, "send_message", VALUE, f"Value {value} for parameter MessageDeduplicationId is "
                      f"invalid. Reason: MessageDeduplicationId {reason}", QueueUrl=fifo, MessageBody="x",
                      MessageGroupId="g", MessageDeduplicationId=value)
    refused_alike(both, "send_message", VALUE, "Value 2 for parameter DelaySeconds is invalid. Reason: The request "
                  "include parameter that is not valid for this queue type.", QueueUrl=fifo, MessageBody="x",
                  MessageGroupId="g", MessageDeduplicationId="d", DelaySeconds=2)
    refused_alike(both, "send_message", "MissingParameter", "The request must contain the parameter MessageGroupId.",
                  QueueUrl=fifo, MessageBody="x", MessageDeduplicationId="d")
    refused_alike(both, "send_message", VALUE, "The queue should either have ContentBasedDeduplication enabled or "
                  "MessageDeduplicationId provided explicitly", QueueUrl=fifo, MessageBody="x", MessageGroupId="g")
    # in a batch, a missing group is an invalid value, and refuses the whole batch
    refused_alike(both, "send_message_batch", VALUE, "The request must contain the parameter MessageGroupId.",
                  QueueUrl=fifo, Entries=[{"Id": "a", "MessageBody": "x", "MessageDeduplicationId": "d"}])


def test_queue_attribute_refusals(both, queue, fifo):
    json_client = both[0]
    json_client.create_queue(QueueName="exists", Attributes={"ReceiveMessageWaitTimeSeconds": "1",
                                                              "DelaySeconds": "1"})
    refused_alike(both, "create_queue", "QueueAlreadyExists", "A queue already exists with the same name and a "
                  "different value for attribute DelaySeconds", json_type="QueueNameExists", QueueName="exists",
                  Attributes={"ReceiveMessageWaitTimeSeconds": "1", "DelaySeconds": "2"})
    refused_alike(both, "set_queue_attributes", "InvalidAttributeName", "Unknown Attribute FifoQueue.",
                  QueueUrl=queue, Attributes={"FifoQueue": "true"})
    refused_alike(both, "set_queue_attributes", "InvalidAttributeValue", "Invalid value for the parameter FifoQueue. "
                  "Reason: Modifying queue type is not supported.", QueueUrl=fifo, Attributes={"FifoQueue": "false"})
    for name, value, message in (
            ("ContentBasedDeduplication", "false", "Unknown Attribute ContentBasedDeduplication."),
            ("DeduplicationScope", "queue",
             "You can specify the DeduplicationScope only when FifoQueue is set to true."),
            ("FifoThroughputLimit", "perQueue",
             "You can specify the FifoThroughputLimit only when FifoQueue is set to true.")):
        refused_alike(both, "create_queue", "InvalidAttributeName", message, QueueName="plain",
                      Attributes={name: value})
    for name, value in (("VisibilityTimeout", "43201"), ("MessageRetentionPeriod", "59"),
                        ("MaximumMessageSize", "1023"), ("DelaySeconds", "901")):
        refused_alike(both, "set_queue_attributes", "InvalidAttributeValue",
                      f"Invalid value for the parameter {name}.", QueueUrl=queue, Attributes={name: value})
    refused_alike(both, "get_queue_attributes", "InvalidAttributeName", "Unknown Attribute Foobar.",
                  QueueUrl=queue, AttributeNames=["Foobar"])


def test_redrive_policies_sqs_refuses(both, queue):
    """A RedrivePolicy SQS refuses is an invalid value of the parameter, quoted whole."""
    dlq = both[0].create_queue(QueueName="words-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    arn = both[0].get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    missing = arn.replace("words-dlq.fifo", "nowhere")
    for policy, reason in (
            ("{}", "Redrive policy does not contain mandatory attribute: maxReceiveCount."),
            ('{"MaxReceiveCount":"4","DeadLetterTargetArn":"x"}',
             "Redrive policy does not contain mandatory attribute: maxReceiveCount."),
            ('{"maxReceiveCount":"4"}', "Redrive policy does not contain mandatory attribute: deadLetterTargetArn."),
            ("not json", "Redrive policy is not a dict or valid json."),
            (f'{{"deadLetterTargetArn":"{arn}","maxReceiveCount":0}}',
             "Invalid value for maxReceiveCount: 0, valid values are from 1 to 1000 both inclusive."),
            (f'{{"deadLetterTargetArn":"{missing}","maxReceiveCount":3}}', "Dead letter target does not exist.")):
        refused_alike(both, "set_queue_attributes", VALUE,
                      f"Value {policy} for parameter RedrivePolicy is invalid. Reason: {reason}",
                      json_type=VALUE_TYPE, QueueUrl=queue, Attributes={"RedrivePolicy": policy})


def test_visibility_changes(both, queue):
    json_client = both[0]
    for client in both:
        client.send_message(QueueUrl=queue, MessageBody="m")
        (message,) = client.receive_message(QueueUrl=queue)["Messages"]
        handle = message["ReceiptHandle"]
        beyond = refusal(client.change_message_visibility, QueueUrl=queue, ReceiptHandle=handle,
                         VisibilityTimeout=43201)
        assert (beyond.code, beyond.message) == (VALUE, "Value 43201 for parameter VisibilityTimeout is invalid. "
                                                 "Reason: Total VisibilityTimeout for the message is beyond the "
                                                 "limit [43200 seconds]")
        client.delete_message(QueueUrl=queue, ReceiptHandle=handle)
        gone = refusal(client.change_message_visibility, QueueUrl=queue, ReceiptHandle=handle, VisibilityTimeout=4)
        assert (gone.code, gone.message, gone.status) == (VALUE, f"Value {handle} for parameter ReceiptHandle is "
                                                          "invalid. Reason: Message does not exist or is not "
                                                          "available for visibility timeout change.", 400)
    refused_alike(both, "delete_message", "ReceiptHandleIsInvalid",
                  'The input receipt handle "garbage" is not a valid receipt handle.', status=404, QueueUrl=queue,
                  ReceiptHandle="garbage")
    # SQS's XML writes the quotation marks as entities
    raw = signed(json_client.gateway_url, json_client.credential, form={
        "Action": "DeleteMessage", "QueueUrl": queue, "ReceiptHandle": "garbage"})
    assert "<Message>The input receipt handle &quot;garbage&quot; is not a valid receipt handle.</Message>" in raw.text
