"""Request bodies of the partitioned queue surface (Queen-style camelCase fields).

Strict types and known fields only: a wrong type or a field this surface does not know (a Queen
option Postbox does not implement among them) is a 400 naming the field, never silently dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from functions.api.common_schema import Id, NonNegative32, StrictBody, name_of
from postbox import names
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item

MAX_ITEMS = 10_000
WEEK = 7 * 24 * 3600


_Body = StrictBody
QueueName = name_of(names.PARTITIONED_QUEUE)
PartitionId = Annotated[str, Field(pattern=r"^\d{1,18}$")] | Id


class QueueOptions(_Body):
    leaseTime: Annotated[int, Field(ge=1, le=WEEK)] | None = None
    retryLimit: Annotated[int, Field(ge=0, le=1000)] | None = None
    retryDelay: Annotated[int, Field(ge=0, le=WEEK * 1000)] | None = None  # milliseconds
    delayedProcessing: Annotated[int, Field(ge=0, le=WEEK)] | None = None
    retentionSeconds: NonNegative32 | None = None
    completedRetentionSeconds: NonNegative32 | None = None
    encryptionEnabled: bool | None = None
    dlqAfterMaxRetries: bool | None = None

    def changes(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(include=self.model_fields_set).items() if v is not None}


class Configure(_Body):
    queue: QueueName
    namespace: Annotated[str, Field(max_length=128)] | None = None
    task: Annotated[str, Field(max_length=128)] | None = None
    options: QueueOptions | None = None


class PushItem(_Body):
    queue: QueueName
    partition: Annotated[str, Field(max_length=256)] = "Default"
    payload: Any = None
    data: Any = None
    transactionId: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    messageId: Annotated[str, Field(min_length=1, max_length=256)] | None = None

    def item(self) -> Item:
        payload = self.payload if "payload" in self.model_fields_set else self.data
        return Item(self.queue, payload, self.partition or "Default", self.transactionId, self.messageId)


class Push(_Body):
    items: Annotated[list[PushItem], Field(min_length=1, max_length=MAX_ITEMS)]

    def to_items(self) -> list[Item]:
        return [i.item() for i in self.items]


class AckBody(_Body):
    leaseId: Annotated[str, Field(min_length=1, max_length=64)]
    transactionId: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    partitionId: PartitionId | None = None
    status: Annotated[str, Field(max_length=32)] = "completed"
    consumerGroup: Annotated[str, Field(max_length=256)] | None = None
    error: Annotated[str, Field(max_length=4096)] | None = None

    def ack(self, group: str | None = None) -> Ack:
        partition = None if self.partitionId is None else str(self.partitionId)
        return Ack(self.leaseId, self.status, self.transactionId, partition, self.consumerGroup or group or None,
                   self.error)


class AckBatch(_Body):
    acknowledgments: Annotated[list[AckBody], Field(min_length=1, max_length=MAX_ITEMS)]
    consumerGroup: Annotated[str, Field(max_length=256)] | None = None

    def acks(self) -> list[Ack]:
        return [a.ack(self.consumerGroup) for a in self.acknowledgments]


class Extend(_Body):
    seconds: Annotated[float, Field(gt=0, le=WEEK)] | None = None


class AckOperation(AckBody):
    type: Literal["ack"]


class PushOperation(Push):
    type: Literal["push"]


class Transaction(_Body):
    operations: Annotated[
        list[Annotated[AckOperation | PushOperation, Field(discriminator="type")]],
        Field(min_length=1, max_length=1000),
    ]

    def to_operations(self) -> list[Ack | list[Item]]:
        return [op.ack() if isinstance(op, AckOperation) else op.to_items() for op in self.operations]


class Replay(_Body):
    ids: Annotated[list[Annotated[str, Field(pattern=r"^\d{1,18}$")] | Id], Field(min_length=1, max_length=1000)]
