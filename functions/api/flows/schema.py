"""Request bodies of the flows surface (`/streams/v1`), as `000_5c4491259ca153ec.txt` names them.

A field this surface does not know is refused by name (400), as on every surface; `state_ops` and
`push_items` are checked element by element inside the cycle so that a bad element fails the cycle
(200, `success: false`) instead of the request.
"""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from postbox import names
from postbox.inputs import INT32_MAX, INT64_MAX


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


QueueName = Annotated[StrictStr, Field(min_length=1, max_length=names.PARTITIONED_QUEUE.max_length)]
PartitionId = StrictStr | Annotated[StrictInt, Field(ge=0, le=INT64_MAX)]


class RegisterQuery(_Body):
    name: StrictStr = Field(min_length=1, max_length=names.FLOW_QUERY.max_length)
    source_queue: QueueName
    sink_queue: Annotated[StrictStr, Field(max_length=names.PARTITIONED_QUEUE.max_length)] | None = None
    config_hash: StrictStr | None = None
    reset: StrictBool | None = False


class GetState(_Body):
    query_id: StrictStr | None = None
    partition_id: PartitionId | None = None
    keys: list[StrictStr] | None = None
    key_prefix: StrictStr | None = None
    ripe_at_or_before: StrictInt | StrictFloat | None = None


class DueState(_Body):
    query_id: StrictStr | None = None
    consumer_group: StrictStr | None = None
    key_prefix: StrictStr | None = None
    ripe_at_or_before: StrictInt | StrictFloat | None = None
    limit: StrictInt | None = Field(default=None, ge=1, le=1000)


class CycleAck(_Body):
    transactionId: StrictStr | None = None
    leaseId: StrictStr | None = None
    status: StrictStr | None = None
    count: StrictInt | None = Field(default=None, ge=0, le=INT32_MAX)


class Cycle(_Body):
    query_id: StrictStr | None = None
    partition_id: PartitionId | None = None
    consumer_group: StrictStr | None = None
    state_ops: list[Any] | None = None
    push_items: list[Any] | None = None
    ack: CycleAck | None = None
    release_lease: StrictBool | None = True
    quiet: StrictBool | None = False
