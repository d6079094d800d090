"""What SQS accepts, Postbox accepts, over both protocols: every limit at its two edges, the longest
ids and names, every character range a body may hold, empty and optional fields, and the attribute
names and filters SQS takes (All, each system attribute, `.*`, `prefix.*`, names it would never
answer)."""

from __future__ import annotations

import hashlib

CHARACTERS = "\t\n\r \x7f\u00e9\u07ff\u0800\ud7ff\ue000\ufffd\U00010000\U0001f600\U0010ffff"
LIMITS = {"DelaySeconds": ("0", "900"), "MaximumMessageSize": ("1024", "1048576"),
          "MessageRetentionPeriod": ("60", "1209600"), "ReceiveMessageWaitTimeSeconds": ("0", "20"),
          "VisibilityTimeout": ("0", "43200"), "KmsDataKeyReusePeriodSeconds": ("60", "86400")}


def test_queue_attributes_at_both_edges(both):
    for p, client in enumerate(both):
        for edge in (0, 1):
            attributes = {name: values[edge] for name, values in LIMITS.items()}
            attributes["KmsMasterKeyId"] = "alias/aws/sqs"  # the reuse period is a KMS key's: answered with one
            url = client.create_queue(QueueName=f"edges-{p}-{edge}", Attributes=attributes)["QueueUrl"]
            got = client.get_queue_attributes(QueueUrl=url, AttributeNames=list(attributes))["Attributes"]
            assert got == attributes
            client.set_queue_attributes(QueueUrl=url, Attributes=attributes)
        fifo = client.create_queue(QueueName=f"edges-{p}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        client.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "true"})  # what it is already
        client.create_queue(QueueName=f"empty-{p}", Attributes={}, tags={})


def test_messages_at_every_limit_and_the_receive_filters_sqs_takes(both):
    for p, client in enumerate(both):
        url = client.create_queue(QueueName=f"limits-{p}", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
        name = "n" * 256
        attributes = {name: {"DataType": "Number." + "t" * 249, "StringValue": "-" + "9" * 38},
                      "big": {"DataType": "Number", "StringValue": "1E+126"},
                      "small": {"DataType": "Number", "StringValue": "-1e128"},
                      "b": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
                      **{f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(6)}}
        size = sum(len(k) + len(v["DataType"]) + len(v.get("StringValue", v.get("BinaryValue", b"")))
                   for k, v in attributes.items())
        sent = client.send_message(QueueUrl=url, MessageBody="x" * (1024 - size), MessageAttributes=attributes,
                                   DelaySeconds=0, MessageSystemAttributes={})
        assert sent["MessageId"]
        client.send_message(QueueUrl=url, MessageBody=CHARACTERS, DelaySeconds=900, MessageAttributes={})
        client.send_message(QueueUrl=url, MessageBody=CHARACTERS, MessageGroupId="!~" + "g" * 126)  # fair queues
        ids = ["i" * 80, "-" * 80, "_", "A-z_09"]
        batch = client.send_message_batch(QueueUrl=url, Entries=[
            {"Id": i, "MessageBody": CHARACTERS, "DelaySeconds": 0} for i in ids])
        assert sorted(e["Id"] for e in batch["Successful"]) == sorted(ids) and "Failed" not in batch
        got = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=20, VisibilityTimeout=43200,
                                     AttributeNames=["All"], MessageSystemAttributeNames=["SenderId", "SequenceNumber"],
                                     MessageAttributeNames=["a0", "a1.*", "AWS.", "..foo", "n.*"],
                                     ReceiveRequestAttemptId="ignored-on-a-standard-queue")["Messages"]
        assert got
        for message in got:
            assert message["MD5OfBody"] == hashlib.md5(message["Body"].encode()).hexdigest()
            if message["Body"].startswith("x"):
                assert set(message["MessageAttributes"]) == {"a0", "a1", name}
        handles = [m["ReceiptHandle"] for m in got]
        client.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[0], VisibilityTimeout=0)
        client.change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": "i" * 80, "ReceiptHandle": handles[0], "VisibilityTimeout": 0}])
        deleted = client.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": f"d{i}", "ReceiptHandle": h} for i, h in enumerate(handles)])
        assert len(deleted["Successful"]) == len(handles) and "Failed" not in deleted

        # the filters SQS takes on a receive (these already matched SQS's)
        url = client.create_queue(QueueName=f"filters-{p}")["QueueUrl"]
        client.send_message(QueueUrl=url, MessageBody="msg", MessageAttributes={
            "Help.Me": {"DataType": "String", "StringValue": "Me"},
            "Hello": {"DataType": "String", "StringValue": "There"},
            "General": {"DataType": "String", "StringValue": "Kenobi"}})

        def names(client=client, url=url, **filters) -> tuple[set[str], set[str]]:
            (m,) = client.receive_message(QueueUrl=url, VisibilityTimeout=0, **filters)["Messages"]
            return set(m.get("MessageAttributes", {})), set(m.get("Attributes", {}))

        every = {"Help.Me", "Hello", "General"}
        assert names(MessageAttributeNames=["All"])[0] == every
        assert names(MessageAttributeNames=[".*"])[0] == every
        assert names(MessageAttributeNames=["*"])[0] == every
        assert names(MessageAttributeNames=["Hel.*"])[0] == {"Help.Me", "Hello"}
        assert names(MessageAttributeNames=["Foo", "Hello"])[0] == {"Hello"}
        assert names(MessageAttributeNames=["AWS."]) == (set(), set())
        system = {"ApproximateFirstReceiveTimestamp", "ApproximateReceiveCount", "SenderId", "SentTimestamp"}
        assert names(AttributeNames=["All"])[1] == system
        assert names(MessageSystemAttributeNames=["All"])[1] == system
        assert names(AttributeNames=["SenderId", "SequenceNumber", "MessageGroupId"])[1] == {"SenderId"}
        # given both lists, SQS reads MessageSystemAttributeNames over JSON and AttributeNames over Query
        assert names(AttributeNames=["SentTimestamp"], MessageSystemAttributeNames=["SenderId"])[1] == \
            ({"SenderId"} if p == 0 else {"SentTimestamp"})
