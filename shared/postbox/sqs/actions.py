"""SQS's actions by name: the parameters each takes (any other is refused by name) and the domain
call that serves it, independent of the wire protocol that carried the request. The role each
needs is checked by the call itself (read, write or manage; see `credentials`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..tenancy import Principal
from . import credentials, errors, identity, messages, moves, permissions, queues, sigv4

_SEND = ("MessageBody", "DelaySeconds", "MessageAttributes", "MessageSystemAttributes", "MessageDeduplicationId",
         "MessageGroupId")
_ENTRY_FIELDS = {
    "SendMessageBatch": ("Id", *_SEND),
    "DeleteMessageBatch": ("Id", "ReceiptHandle"),
    "ChangeMessageVisibilityBatch": ("Id", "ReceiptHandle", "VisibilityTimeout"),
}


@dataclass(frozen=True)
class Call:
    principal: Principal
    base: str  # the endpoint's URL (`<base URL>/sqs`), which queue URLs start with
    params: dict[str, Any]
    target_queue: str | None  # the queue a queue-URL request target names
    trace_header: str | None = None  # the request's X-Amzn-Trace-Id: the AWSTraceHeader of what it sends
    query: bool = False  # the request spoke the Query protocol (some answers differ by protocol)

    def queue(self) -> str:
        """The queue the request names: its QueueUrl, else the queue URL it was sent to."""
        url = self.params.get("QueueUrl")
        if url is None and self.target_queue is not None:
            return self.target_queue
        name = identity.name_from_url(self.principal.tenant_id, url)
        return name


Action = Callable[[Call], dict[str, Any]]


ACTIONS: dict[str, tuple[tuple[str, ...], Action]] = {
    "CreateQueue": (("QueueName", "Attributes", "tags"), lambda c: queues.create(
        c.principal, c.base, c.params.get("QueueName"), c.params.get("Attributes") or {}, c.params.get("tags") or {})),
    "GetQueueUrl": (("QueueName", "QueueOwnerAWSAccountId"), lambda c: _owned(c) or queues.get_url(
        c.principal, c.base, c.params.get("QueueName"))),
    "ListQueues": (("QueueNamePrefix", "NextToken", "MaxResults"), lambda c: queues.list_urls(
        c.principal, c.base, c.params.get("QueueNamePrefix"), c.params.get("MaxResults"), c.params.get("NextToken"))),
    "DeleteQueue": (("QueueUrl",), lambda c: _forgetting(c, queues.delete(c.principal, c.queue()))),
    "PurgeQueue": (("QueueUrl",), lambda c: queues.purge(c.principal, c.queue())),
    "GetQueueAttributes": (("QueueUrl", "AttributeNames"), lambda c: queues.get_attributes(
        c.principal, c.queue(), c.params.get("AttributeNames"))),
    "SetQueueAttributes": (("QueueUrl", "Attributes"), lambda c: _forgetting(c, queues.set_attributes(
        c.principal, c.queue(), c.params.get("Attributes")))),
    "TagQueue": (("QueueUrl", "Tags"), lambda c: queues.tag(c.principal, c.queue(), c.params.get("Tags"))),
    "UntagQueue": (("QueueUrl", "TagKeys"), lambda c: queues.untag(c.principal, c.queue(), c.params.get("TagKeys"))),
    "ListQueueTags": (("QueueUrl",), lambda c: queues.list_tags(c.principal, c.queue())),
    "ListDeadLetterSourceQueues": (("QueueUrl", "NextToken", "MaxResults"), lambda c: queues.dead_letter_sources(
        c.principal, c.base, c.queue(), c.params.get("MaxResults"), c.params.get("NextToken"))),
    "SendMessage": (("QueueUrl", *_SEND), lambda c: messages.send(c.principal, c.queue(), c.params,
                                                                  c.trace_header)),
    "SendMessageBatch": (("QueueUrl", "Entries"), lambda c: messages.send_batch(
        c.principal, c.queue(), c.params.get("Entries"), c.trace_header)),
    "ReceiveMessage": (("QueueUrl", "AttributeNames", "MessageSystemAttributeNames", "MessageAttributeNames",
                        "MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds", "ReceiveRequestAttemptId"),
                       lambda c: messages.receive(c.principal, c.queue(), c.params, c.query)),
    "DeleteMessage": (("QueueUrl", "ReceiptHandle"), lambda c: messages.delete(
        c.principal, c.queue(), c.params.get("ReceiptHandle"))),
    "DeleteMessageBatch": (("QueueUrl", "Entries"), lambda c: messages.delete_batch(
        c.principal, c.queue(), c.params.get("Entries"))),
    "ChangeMessageVisibility": (
        ("QueueUrl", "ReceiptHandle", "VisibilityTimeout"), lambda c: messages.change_visibility(
        c.principal, c.queue(), c.params.get("ReceiptHandle"), c.params.get("VisibilityTimeout"))),
    "ChangeMessageVisibilityBatch": (("QueueUrl", "Entries"), lambda c: messages.change_visibility_batch(
        c.principal, c.queue(), c.params.get("Entries"))),
    "StartMessageMoveTask": (("SourceArn", "DestinationArn", "MaxNumberOfMessagesPerSecond"),
                             lambda c: moves.start(c.principal, c.params)),
    "ListMessageMoveTasks": (("SourceArn", "MaxResults"), lambda c: moves.list_tasks(c.principal, c.params)),
    "CancelMessageMoveTask": (("TaskHandle",), lambda c: moves.cancel(c.principal, c.params)),
    "AddPermission": (("QueueUrl", "Label", "AWSAccountIds", "Actions"), lambda c: permissions.add(
        c.principal, c.queue(), c.params.get("Label"), c.params.get("AWSAccountIds"), c.params.get("Actions"))),
    "RemovePermission": (("QueueUrl", "Label"), lambda c: permissions.remove(
        c.principal, c.queue(), c.params.get("Label"))),
}


def _owned(call: Call) -> None:
    owner = call.params.get("QueueOwnerAWSAccountId")
    if owner is not None and owner != identity.account_id(call.principal.tenant_id):
        raise errors.no_queue()


def _forgetting(call: Call, answer: dict[str, Any]) -> dict[str, Any]:
    """A queue whose attributes changed (or that is gone) is looked up afresh by this process's sends."""
    messages.forget(call.principal, call.queue())
    return answer


def _check_fields(action: str, params: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for name in params:
        if name not in allowed:
            raise errors.invalid_parameter(f"Unknown parameter {str(name)[:100]} for {action}; it takes "
                                           f"{', '.join(allowed)}.")
    fields = _ENTRY_FIELDS.get(action)
    if fields and isinstance(params.get("Entries"), list):
        for entry in params["Entries"]:
            for name in entry if isinstance(entry, dict) else ():
                if name not in fields:
                    raise errors.invalid_parameter(f"Unknown parameter {str(name)[:100]} in an entry of {action}.")


def run(action: str, principal: Principal, base: str, params: Any, target_queue: str | None = None, *,
        trace_header: str | None = None, query: bool = False) -> dict:
    """Serve one SQS action for an authenticated caller; SqsError for anything SQS refuses."""
    found = ACTIONS.get(action)
    if found is None:
        raise errors.unknown_action(action)
    if not isinstance(params, dict):
        raise errors.malformed("The request body must be a JSON object.")
    allowed, serve = found
    _check_fields(action, params, allowed)
    return without_empty(serve(Call(principal, base, params, target_queue, trace_header, query)))


def without_empty(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer as SQS writes it in both protocols: a list or a map with nothing in it is left out,
    required by the model or not (ListQueues with no queues has no QueueUrls, a batch with no failures
    no Failed), as the Query protocol's XML, which has no way to write one, always had it."""
    return {k: v for k, v in answer.items() if v != [] and v != {}}


def authenticate(request: sigv4.Request, now: datetime | None = None) -> Principal:
    """The principal of a request signed with an SQS credential (in its headers or, presigned, in its
    query string), or what AWS answers when it is not."""
    auth = sigv4.read(request)
    found = credentials.resolve(auth.access_key_id)
    if found is None:
        raise errors.unknown_key()
    sigv4.verify(request, auth, found.secret, identity.region(), now or datetime.now(UTC))
    return found.principal
