"""What SQS leaves out of an answer when it is empty, read raw in both protocols: a list or a map with
nothing in it is not written (ListQueues with no queues, a batch with no failures, a queue no queue
names as its dead-letter queue, a receive with no message), and an empty result is `<…Result/>`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sqs_clients import REGION, signed


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


def test_the_cli_prints_nothing_for_an_empty_list(gateway, mint, tmp_path):
    """`aws sqs list-queues` on an account with no queues prints nothing, as against SQS."""
    cli = shutil.which("aws", path=str(Path(sys.executable).parent)) or shutil.which("aws")
    if cli is None:
        return  # the AWS CLI (in the dev extra) is not installed
    credential = mint("manage")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": credential["access_key_id"],
           "AWS_SECRET_ACCESS_KEY": credential["secret_access_key"], "AWS_DEFAULT_REGION": REGION,
           "AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
           "AWS_PAGER": ""}
    done = subprocess.run([cli, "sqs", "list-queues", "--endpoint-url", f"{gateway.url}/sqs", "--output", "json"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "", (done.stdout, done.stderr)
