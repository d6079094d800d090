"""What SQS leaves out of an answer when it is empty, read raw in both protocols: a list or a map with
nothing in it is not written (ListQueues with no queues, a batch with no failures, a queue no queue
names as its dead-letter queue, a receive with no message), and an empty result is `<…Result/>`.
(The AWS CLI's view of it is in test_sqs_awscli.)"""

from __future__ import annotations

from sqs_clients import signed


def both_raw(client, action: str, body: dict) -> tuple[dict, str]:
    """(the JSON answer, the Query answer's text) of one action."""
    over_json = signed(client.gateway_url, client.credential, target=action, body=body)
    over_query = signed(client.gateway_url, client.credential, form={"Action": action, **_form(body)})
    assert over_json.status_code == over_query.status_code == 200, (over_json.text, over_query.text)
    return over_json.json(), over_query.text


def _form(body: dict) -> dict:
    """The Query parameters of the simple JSON bodies these tests send."""
    out = {}
    for key, value in body.items():
        if key == "Entries":
            for i, entry in enumerate(value, 1):
                out.update({f"SendMessageBatchRequestEntry.{i}.{k}": v for k, v in entry.items()})
        else:
            out[key] = value
    return out


def test_empty_lists_are_left_out_in_both_protocols(both):
    client = both[0]
    doc, xml = both_raw(client, "ListQueues", {})
    assert doc == {} and "<ListQueuesResult/>" in xml
    url = client.create_queue(QueueName="alone")["QueueUrl"]
    doc, xml = both_raw(client, "ListQueues", {"QueueNamePrefix": "none-"})
    assert doc == {} and "<ListQueuesResult/>" in xml
    doc, xml = both_raw(client, "ReceiveMessage", {"QueueUrl": url})
    assert doc == {} and "<ReceiveMessageResult/>" in xml
    doc, xml = both_raw(client, "ListDeadLetterSourceQueues", {"QueueUrl": url})
    assert doc == {} and "<ListDeadLetterSourceQueuesResult/>" in xml
    doc, xml = both_raw(client, "ListQueueTags", {"QueueUrl": url})
    assert doc == {} and "<ListQueueTagsResult/>" in xml
    doc, xml = both_raw(client, "GetQueueAttributes", {"QueueUrl": url})
    assert doc == {} and "<GetQueueAttributesResult/>" in xml
    doc, _ = both_raw(client, "SendMessageBatch", {"QueueUrl": url, "Entries": [{"Id": "a", "MessageBody": "x"}]})
    assert set(doc) == {"Successful"}  # no Failed
    doc, _ = both_raw(client, "SendMessageBatch", {"QueueUrl": url, "Entries": [{"Id": "a", "MessageBody": "\x01"}]})
    assert set(doc) == {"Failed"}  # no Successful
    dlq = client.create_queue(QueueName="unused-dlq")["QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    doc = signed(client.gateway_url, client.credential, target="ListMessageMoveTasks", body={"SourceArn": arn}).json()
    assert doc == {}

