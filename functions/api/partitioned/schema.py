"""Request bodies of the partitioned queue surface (Queen-style camelCase fields).

Strict types and known fields only: a wrong type or a field this surface does not know is a 400
naming the field, never silently dropped. The fields Queen's own client sends that Postbox does not
implement (`priority`, `maxSize`, `windowBuffer`, … on configure; `traceId`, `priority` on push) are
accepted by name and ignored, as docs/partitioned.md lists.
"""

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from functions.api.common_schema import Id, NonNegative32, StrictBody, name_of
from postbox import names
from postbox.inputs import INT64_MAX
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item
from postbox.partitioned.reads import FetchEntry

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
    # Queen's, accepted and ignored (echoed back by configure):
    priority: int | None = None
    maxSize: NonNegative32 | None = None
    windowBuffer: NonNegative32 | None = None
    deadLetterQueue: bool | None = None
    maxWaitTimeSeconds: NonNegative32 | None = None

    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {"priority", "maxSize", "windowBuffer", "deadLetterQueue", "maxWaitTimeSeconds"})

    def changes(self) -> dict[str, Any]:
        return {k: v for k, v in self.given().items() if v is not None and k not in self.IGNORED}

    def given(self) -> dict[str, Any]:
        """Every option as sent, the ignored ones included: what configure echoes, as Queen does."""
        return self.model_dump(include=self.model_fields_set)


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
    traceId: Annotated[str, Field(max_length=256)] | None = None  # Queen's, accepted and ignored
    priority: int | None = None  # Queen's, accepted and ignored

    def item(self) -> Item:
        payload = self.payload if "payload" in self.model_fields_set else self.data
        return Item(self.queue, payload, self.partition or "Default", self.transactionId, self.messageId)


class Push(_Body):
    items: Annotated[list[PushItem], Field(min_length=1, max_length=MAX_ITEMS)]

    def to_items(self) -> list[Item]:
        return [i.item() for i in self.items]


class AckBody(_Body):
    # Absent: the live lease of the partition and group (Queen fences an ack only with the lease it carries).
    leaseId: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    transactionId: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    partitionId: PartitionId | None = None
    status: Annotated[str, Field(max_length=32)] = "completed"
    consumerGroup: Annotated[str, Field(max_length=256)] | None = None
    error: Annotated[str, Field(max_length=4096)] | None = None

    def ack(self, group: str | None = None, lent: str | None = None) -> Ack:
        partition = None if self.partitionId is None else str(self.partitionId)
        return Ack(self.leaseId or lent, self.status, self.transactionId, partition,
                   self.consumerGroup or group or None, self.error)


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
    # Leases that must all be live for anything to apply; the one an ack without its own uses when
    # there is exactly one (as Queen lends it).
    requiredLeases: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=1000)] = []

    def lent(self) -> str | None:
        return self.requiredLeases[0] if len(set(self.requiredLeases)) == 1 else None

    def to_operations(self) -> list[Ack | list[Item]]:
        lent = self.lent()
        return [op.ack(lent=lent) if isinstance(op, AckOperation) else op.to_items() for op in self.operations]


class Replay(_Body):
    ids: Annotated[list[Annotated[str, Field(pattern=r"^\d{1,18}$")] | Id], Field(min_length=1, max_length=1000)]


MAX_FETCH_BYTES = 8 * 1024 * 1024  # a call's payload budget, Queen's default; the answer stays inside Lambda's


class FetchEntryBody(_Body):
    queue: QueueName
    partition: Annotated[str, Field(min_length=1, max_length=256)]
    offset: Annotated[int, Field(ge=0, le=INT64_MAX)] = 0
    maxBytes: Annotated[int, Field(ge=1, le=MAX_FETCH_BYTES)] | None = None


class Fetch(_Body):
    entries: Annotated[list[FetchEntryBody], Field(min_length=1, max_length=1024)]
    maxBytes: Annotated[int, Field(ge=1, le=MAX_FETCH_BYTES)] = MAX_FETCH_BYTES

    def to_entries(self) -> list[FetchEntry]:
        return [FetchEntry(e.queue, e.partition, e.offset, e.maxBytes) for e in self.entries]


class Trace(_Body):
    """What a consumer's `message.trace(...)` sends; Postbox accepts it and keeps nothing."""

    transactionId: Annotated[str, Field(max_length=256)] | None = None
    partitionId: Annotated[str, Field(max_length=64)] | None = None
    consumerGroup: Annotated[str, Field(max_length=256)] | None = None
    traceNames: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=100)] | None = None
    eventType: Annotated[str, Field(max_length=64)] | None = None
    data: Any = None
