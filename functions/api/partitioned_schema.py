"""Request bodies of the partitioned queue surface (Queen-style camelCase fields).

Strict types (a wrong type is a 400 naming the field); fields Queen clients may send that this
surface does not use are ignored rather than refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item

MAX_ITEMS = 10_000
WEEK = 7 * 24 * 3600


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class QueueOptions(_Body):
    leaseTime: Annotated[int, Field(ge=1, le=WEEK)] | None = None
    retryLimit: Annotated[int, Field(ge=0, le=1000)] | None = None
    retryDelay: Annotated[int, Field(ge=0, le=WEEK * 1000)] | None = None  # milliseconds
    delayedProcessing: Annotated[int, Field(ge=0, le=WEEK)] | None = None
    retentionSeconds: Annotated[int, Field(ge=0)] | None = None
    completedRetentionSeconds: Annotated[int, Field(ge=0)] | None = None
    encryptionEnabled: bool | None = None
    dlqAfterMaxRetries: bool | None = None

    def changes(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(include=self.model_fields_set).items() if v is not None}


class Configure(_Body):
    queue: Annotated[str, Field(min_length=1, max_length=128)]
    namespace: str | None = None
    task: str | None = None
    options: QueueOptions | None = None


class PushItem(_Body):
    queue: Annotated[str, Field(min_length=1, max_length=128)]
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
    partitionId: str | int | None = None
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
    ids: Annotated[list[Annotated[str, Field(pattern=r"^\d{1,18}$")] | int], Field(min_length=1, max_length=1000)]

    @model_validator(mode="after")
    def _positive(self) -> Replay:
        if any(int(i) < 0 for i in self.ids):
            raise ValueError("ids must be non-negative")
        return self
