"""The error code SQS picks for each case, with its HTTP status: the JSON protocol's `__type` (by its
namespace too) and `x-amzn-query-error`, read raw, and the Query protocol's `<Code>`; InvalidAddress
for a queue URL whose account part is no account id, InvalidAction for an action a queue's URL does
not serve, and the bare `<UnknownOperationException/>` of a Query request naming no action."""

from __future__ import annotations

from sqs_clients import refusal, refused_alike, signed

SQS = "com.amazonaws.sqs"
CORAL = "com.amazon.coral.service"


def json_error(client, action: str, body: dict) -> tuple[int, str, str, str]:
    """(status, `__type`, `x-amzn-query-error`, message) of a raw JSON request."""
    answer = signed(client.gateway_url, client.credential, target=action, body=body)
    doc = answer.json()
    return answer.status_code, doc["__type"], answer.headers["x-amzn-query-error"], doc["message"]


def test_each_json_error_is_named_as_sqs_names_it(both):
    client = both[0]
    url = client.create_queue(QueueName="named", Attributes={"DelaySeconds": "1"})["QueueUrl"]
    entry = {"Id": "a", "MessageBody": "x"}
    for action, body, status, json_type, query_error in (
            ("SendMessage", {"QueueUrl": url, "MessageBody": "x", "DelaySeconds": 901}, 400,
             f"{CORAL}#InvalidParameterValueException", "InvalidParameterValue;Sender"),
            ("SendMessage", {"QueueUrl": url, "MessageBody": ""}, 400,
             f"{CORAL}#MissingRequiredParameterException", "MissingParameter;Sender"),
            ("GetQueueUrl", {"QueueName": "nowhere"}, 400,
             f"{SQS}#QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue;Sender"),
            ("CreateQueue", {"QueueName": "named", "Attributes": {"DelaySeconds": "2"}}, 400,
             f"{SQS}#QueueNameExists", "QueueAlreadyExists;Sender"),
            ("SendMessageBatch", {"QueueUrl": url, "Entries": []}, 400,
             f"{SQS}#EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest;Sender"),
            ("SendMessageBatch", {"QueueUrl": url, "Entries": [{**entry, "Id": str(i)} for i in range(11)]}, 400,
             f"{SQS}#TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest;Sender"),
            ("SendMessageBatch", {"QueueUrl": url, "Entries": [entry, entry]}, 400,
             f"{SQS}#BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct;Sender"),
            ("DeleteMessageBatch", {"QueueUrl": url, "Entries": [{"Id": "no:colon", "ReceiptHandle": "h"}]}, 400,
             f"{SQS}#InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId;Sender"),
            ("SendMessageBatch", {"QueueUrl": url, "Entries": [{"Id": "a", "MessageBody": "b" * 1048577}]}, 400,
             f"{SQS}#BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong;Sender"),
            ("GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["Foobar"]}, 400,
             f"{SQS}#InvalidAttributeName", "InvalidAttributeName;Sender"),
            ("SetQueueAttributes", {"QueueUrl": url, "Attributes": {"DelaySeconds": "901"}}, 400,
             f"{SQS}#InvalidAttributeValue", "InvalidAttributeValue;Sender"),
            ("SendMessage", {"QueueUrl": url, "MessageBody": "\x01"}, 400,
             f"{SQS}#InvalidMessageContents", "InvalidMessageContents;Sender"),
            ("DeleteMessage", {"QueueUrl": url, "ReceiptHandle": "garbage"}, 404,
             f"{SQS}#ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid;Sender")):
        got = json_error(client, action, body)
        assert got[:3] == (status, json_type, query_error), (action, got)
    client.purge_queue(QueueUrl=url)
    assert json_error(client, "PurgeQueue", {"QueueUrl": url})[:3] == (
        403, f"{SQS}#PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress;Sender")


def test_a_queue_url_whose_account_is_no_account_id_is_an_invalid_address(both):
    client = both[0]
    url = client.create_queue(QueueName="addressed")["QueueUrl"]
    base, account, name = url.rsplit("/", 2)
    for address in (f"{base}/000000000/{name}", f"{base}/not-an-account/{name}", f"{base}/{account}x/{name}"):
        refused_alike(both, "send_message", "InvalidAddress", f"The address {address} is not valid for this endpoint.",
                      status=404, json_type="InvalidAddress", QueueUrl=address, MessageBody="x")
    # an account id of another account, or a URL with no path, names no queue of the caller's
    for address in (f"{base}/{'1' * 12 if account != '1' * 12 else '2' * 12}/{name}", "http://whatever-address"):
        assert refusal(client.send_message, QueueUrl=address, MessageBody="x").code == \
            "AWS.SimpleQueueService.NonExistentQueue"


def test_the_query_endpoints_refuse_what_they_do_not_serve(both):
    client = both[0]
    url = client.create_queue(QueueName="endpoint")["QueueUrl"]
    path = "/sqs/" + url.split("/sqs/", 1)[1]
    for action, params in (("CreateQueue", {"QueueName": "other"}), ("ListQueues", {})):
        for method in ("GET", "POST"):
            answer = signed(client.gateway_url, client.credential, form={"Action": action, **params},
                            method=method, path=path)
            assert answer.status_code == 400, answer.text
            assert "<Type>Sender</Type><Code>InvalidAction</Code>" in answer.text
            assert f"<Message>The action {action} is not valid for this endpoint.</Message>" in answer.text
    assert client.list_queues(QueueNamePrefix="other").get("QueueUrls", []) == []  # nothing was made
    # GetQueueUrl is served at a queue's URL, as SQS serves it
    served = signed(client.gateway_url, client.credential, form={"Action": "GetQueueUrl", "QueueName": "endpoint"},
                    method="GET", path=path)
    assert served.status_code == 200 and f"<QueueUrl>{url}</QueueUrl>" in served.text
    for where in (path, "/sqs"):
        bare = signed(client.gateway_url, client.credential, method="GET", path=where)
        assert (bare.status_code, bare.text) == (404, "<UnknownOperationException/>")
    unknown = signed(client.gateway_url, client.credential, form={"Action": "FooBar", "Version": "2012-11-05"})
    assert unknown.status_code == 400 and "<Code>InvalidAction</Code>" in unknown.text
    assert "<Message>The action FooBar is not valid for this endpoint.</Message>" in unknown.text


def test_a_nul_outside_a_message_is_refused_never_a_500(both):
    """A NUL PostgreSQL cannot store, in a parameter that holds no message text, is InvalidMessageContents
    over both protocols; in a batch entry's body it fails that entry alone over Query, as SQS fails it."""
    client = both[0]
    url = client.create_queue(QueueName="nul")["QueueUrl"]
    for action, params in (("SendMessage", {"QueueUrl": "a\x00b", "MessageBody": "x"}),
                           ("TagQueue", {"QueueUrl": url, "Tag.1.Key": "k", "Tag.1.Value": "v\x00"}),
                           ("CreateQueue", {"QueueName": "ok", "Attribute.1.Name": "Policy",
                                            "Attribute.1.Value": "\x00"}),
                           ("ListQueues", {"QueueNamePrefix": "\x00"})):
        answer = signed(client.gateway_url, client.credential, form={"Action": action, **params})
        assert answer.status_code == 400 and "<Code>InvalidMessageContents</Code>" in answer.text, answer.text
    over_json = refusal(client.tag_queue, QueueUrl=url, Tags={"k": "v\x00"})
    assert (over_json.code, over_json.status) == ("InvalidMessageContents", 400)
    batch = signed(client.gateway_url, client.credential, form={
        "Action": "SendMessageBatch", "QueueUrl": url, "SendMessageBatchRequestEntry.1.Id": "good",
        "SendMessageBatchRequestEntry.1.MessageBody": "fine", "SendMessageBatchRequestEntry.2.Id": "nul",
        "SendMessageBatchRequestEntry.2.MessageBody": "n\x00l"})
    assert batch.status_code == 200 and "<Id>good</Id>" in batch.text
    assert "<Id>nul</Id><SenderFault>true</SenderFault><Code>InvalidMessageContents</Code>" in batch.text
