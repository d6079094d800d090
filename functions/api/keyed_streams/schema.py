"""Request bodies of the streams surface (`001_fa8b3fdfbbd9d07e.txt` plus the publish, subscription
and consume routes it implies). Strict models: a wrong type is a 400 naming the field."""

from typing import Annotated, Any, Literal

from pydantic import Field

from functions.api.common_schema import StrictBody, name_of
from postbox import names
from postbox.keyed_streams.publishing import MAX_BATCH

MAX_LEASE_MS = 12 * 3600 * 1000

Name = name_of(names.KEYED_STREAM)
SubscriptionName = name_of(names.SUBSCRIPTION)
ProjectName = Annotated[str, Field(min_length=1, max_length=names.PROJECT.max_length)]
Backlog = Annotated[int, Field(ge=0, le=10**12)]

_Strict = StrictBody


class CreateProject(_Strict):
    name: ProjectName


class CreateStream(_Strict):
    name: Name
    project: ProjectName | None = None
    retention: Annotated[str, Field(min_length=1, max_length=32)] | None = None
    max_backlog: Backlog | None = None


class PatchStream(_Strict):
    retention: Annotated[str, Field(min_length=1, max_length=32)] | None = None
    max_backlog: Backlog | None = None

    def changes(self) -> dict[str, Any]:
        """Only what was sent: a null max_backlog clears the cap, a null retention restores the default."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class OutgoingMessage(_Strict):
    """One message to publish: what a publish body holds, and each item of a batch."""

    payload: Any
    key: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    headers: dict[str, Any] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    deliver_at: Annotated[str, Field(max_length=64)] | None = None
    expires_at: Annotated[str, Field(max_length=64)] | None = None


class Publish(OutgoingMessage):
    project: ProjectName | None = None


def _items_are_messages(schema: dict[str, Any]) -> None:
    """Document each item as an OutgoingMessage: the model also takes any other value, so that an item that
    does not fit is refused in its place (by the handler) instead of failing the whole batch."""
    schema["items"] = schema["items"]["anyOf"][0]


class PublishBatch(_Strict):
    messages: Annotated[list[OutgoingMessage | Any], Field(min_length=1, max_length=MAX_BATCH,
                                                   json_schema_extra=_items_are_messages)]
    project: ProjectName | None = None


class CreateSubscription(_Strict):
    name: SubscriptionName
    max_deliveries: Annotated[int, Field(ge=1, le=1000)] = 5
    lease_ms: Annotated[int, Field(ge=100, le=MAX_LEASE_MS)] = 30_000
    start: Literal["latest", "earliest"] = "latest"


class Consume(_Strict):
    max_messages: Annotated[int, Field(ge=1, le=100)] = 10
    lease_ms: Annotated[int, Field(ge=100, le=MAX_LEASE_MS)] | None = None
    wait_ms: Annotated[int, Field(ge=0, le=20_000)] = 0


class Receipts(_Strict):
    receipts: Annotated[list[Annotated[str, Field(max_length=80)]], Field(min_length=1, max_length=1000)]


class Nack(Receipts):
    delay_ms: Annotated[int, Field(ge=0, le=MAX_LEASE_MS)] = 0
