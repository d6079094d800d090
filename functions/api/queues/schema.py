"""Request bodies of the queues surface, with the limits of `004_f37822fc9d3646da.txt`.

Strict models: a wrong type or an unknown field is a 422 naming the field, never silently coerced
or dropped; `message` is required on a send (null is a message, a missing one is a mistake).
"""

from typing import Annotated, Any, Literal

from pydantic import Field

from functions.api.common_schema import StrictBody

MAX_DELAY = 7 * 24 * 3600
MAX_VT = 43_200


_Strict = StrictBody

_NULLABLE_CONSUMER_FIELDS = {"visibility_timeout_sec"}


class Consumer(_Strict):
    # One of the tenant's own functions, <prefix><tenant id hex>-<name> (postbox.queues.consumer_functions).
    function_name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")] | None = None
    enabled: bool | None = None
    batch_size: Annotated[int, Field(ge=1, le=100)] | None = None
    concurrency: Annotated[int, Field(ge=1, le=10)] | None = None
    visibility_timeout_sec: Annotated[int, Field(ge=10, le=MAX_VT)] | None = None
    ack: Literal["archive", "delete"] | None = None

    def changes(self) -> dict[str, Any]:
        """Only the fields sent; a null means "leave as is" except where null is a value."""
        sent = self.model_dump(include=self.model_fields_set)
        return {k: v for k, v in sent.items() if v is not None or k in _NULLABLE_CONSUMER_FIELDS}


class QueueSettings(_Strict):
    description: Annotated[str, Field(max_length=500)] | None = None
    visibility_timeout_sec: Annotated[int, Field(ge=0, le=MAX_VT)] | None = None
    max_reads: Annotated[int, Field(ge=1, le=1000)] | None = None
    dead_letter_queue: Annotated[str, Field(max_length=48)] | None = None
    retention_days: Annotated[int, Field(ge=1, le=365)] | None = None
    app_send: bool | None = None
    consumer: Consumer | None = None

    def changes(self) -> dict[str, Any]:
        """The fields the caller sent (PATCH sends only what changes)."""
        out = {name: getattr(self, name) for name in self.model_fields_set}
        if "consumer" in out and out["consumer"] is not None:
            out["consumer"] = out["consumer"].changes()
        return out


class CreateQueue(QueueSettings):
    name: Annotated[str, Field(min_length=1, max_length=48)]


class SendMessage(_Strict):
    message: Any
    delay: Annotated[float, Field(ge=0, le=MAX_DELAY)] = 0
    headers: dict[str, Any] | None = None


class SendBatch(_Strict):
    messages: Annotated[list[Any], Field(min_length=1, max_length=100)]
    delay: Annotated[float, Field(ge=0, le=MAX_DELAY)] = 0
    headers: dict[str, Any] | None = None


class ReadMessages(_Strict):
    qty: Annotated[int, Field(ge=1, le=100)] = 1
    vt: Annotated[float, Field(ge=0, le=MAX_VT)] | None = None
    wait_seconds: Annotated[float, Field(ge=0, le=20)] = 0


class PopMessages(_Strict):
    qty: Annotated[int, Field(ge=1, le=100)] = 1


class MessageIds(_Strict):
    msg_ids: Annotated[list[int], Field(min_length=1, max_length=1000)]  # ids no message has match nothing


class SetVisibility(_Strict):
    msg_id: int
    vt: Annotated[float, Field(ge=0, le=MAX_VT)]


class Purge(_Strict):
    include_archived: bool = False
