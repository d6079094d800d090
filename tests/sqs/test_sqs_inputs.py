"""No input of any shape reaches an unhandled exception: every action, every parameter it takes, with
values of every JSON type (and entries of every shape), signed as a client signs, is answered by
SQS's error (a 4xx) or served, never a 500."""

from __future__ import annotations

import json

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from postbox.sqs.actions import _ENTRY_FIELDS, ACTIONS

VALUES = [None, True, -1, 2**70, 1.5, "", "x" * 300, "\u0000", [], [1, "a", None], {}, {"a": {"b": []}}]


def test_every_parameter_with_values_of_every_type(gateway, mint, sqs):
    url = sqs.create_queue(QueueName="shapes")["QueueUrl"]
    fifo = sqs.create_queue(QueueName="shapes.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    credential = mint("manage")
    signer = SigV4Auth(Credentials(credential["access_key_id"], credential["secret_access_key"]), "sqs", "us-east-1")
    statuses = set()
    with httpx.Client(timeout=30) as http:
        for action, (fields, _) in ACTIONS.items():
            for field in fields:
                entries = [[{"Id": "a", f: v}] for f in _ENTRY_FIELDS.get(action, ()) for v in VALUES]
                for value in VALUES + (entries if field == "Entries" else []):
                    params = {"QueueUrl": fifo if isinstance(value, list) else url, field: value}
                    request = AWSRequest(method="POST", url=f"{gateway.url}/sqs", data=json.dumps(params).encode(),
                                         headers={"Content-Type": "application/x-amz-json-1.0",
                                                  "X-Amz-Target": f"AmazonSQS.{action}"})
                    signer.add_auth(request)
                    answer = http.post(request.url, content=request.body, headers=dict(request.headers))
                    assert answer.status_code < 500, (action, field, value, answer.text)
                    statuses.add(answer.status_code)
    assert 400 in statuses and 200 in statuses
