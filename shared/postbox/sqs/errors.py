"""SQS's errors as AWS answers them, in one place for both protocols: the name SDKs branch on (the
JSON `__type`), the older Query code they also read (the Query `<Code>`, and the JSON protocol's
`x-amzn-query-error` header), the HTTP status, and each message worded as SQS words it. Where SQS's
two protocols word one error differently, the error carries both (`message`, `query_message`).
Every refusal of the SQS face is made here, so no action writes its own wording of an AWS error."""

from __future__ import annotations

from typing import Any

from ..errors import PostboxError

SQS = "com.amazonaws.sqs"
CORAL = "com.amazon.coral.service"


class SqsError(PostboxError):
    """One of SQS's error answers: `kind` names the `__type`, `query_code` the header's code."""

    def __init__(self, kind: str, message: str, *, status: int = 400, query_code: str | None = None,
                 namespace: str = SQS, fault: str = "Sender", query_message: str | None = None) -> None:
        super().__init__(message, code=query_code or kind)
        self.status = status
        self.kind = kind
        self.namespace = namespace
        self.fault = fault
        self.query_message = query_message or message

    @property
    def query_code(self) -> str:
        return self.code


def _simple(kind: str) -> str:
    return f"AWS.SimpleQueueService.{kind}"


def invalid_value(value: Any, parameter: str, reason: str | None = None) -> SqsError:
    """SQS's wording of a parameter's value it refuses: "Value V for parameter P is invalid. Reason: R"."""
    text = f"Value {str(value)[:1024]} for parameter {parameter} is invalid."
    return invalid_parameter(f"{text} Reason: {reason}" if reason else text)


# ---- queues -----------------------------------------------------------------------------------


def no_queue() -> SqsError:
    """The two protocols word it apart (the Query one still names the WSDL of SQS's SOAP days)."""
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.",
                    query_code=_simple("NonExistentQueue"),
                    query_message="The specified queue does not exist for this wsdl version.")


def invalid_address(address: str) -> SqsError:
    """A QueueUrl SQS cannot read as a queue's address (its account part is not an account id)."""
    return SqsError("InvalidAddress", f"The address {address[:1000]} is not valid for this endpoint.", status=404)


def queue_exists(message: str) -> SqsError:
    return SqsError("QueueNameExists", message, query_code="QueueAlreadyExists")


def deleted_recently() -> SqsError:
    return SqsError("QueueDeletedRecently", "You must wait 60 seconds after deleting a queue before you can create "
                    "another with the same name.", query_code=_simple("QueueDeletedRecently"))


def queue_exists_with(attribute: str) -> SqsError:
    """CreateQueue of an existing name with an attribute set otherwise: SQS names the first that differs."""
    return queue_exists(f"A queue already exists with the same name and a different value for attribute {attribute}")


def invalid_queue_name() -> SqsError:
    return invalid_parameter("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")


def throttled(message: str) -> SqsError:
    """SQS's answer to a request over a rate or a count it allows (SDKs retry it, after Retry-After):
    403, as SQS's model declares it."""
    return SqsError("RequestThrottled", message, status=403)


# ---- parameters -------------------------------------------------------------------------------


def invalid_parameter(message: str) -> SqsError:
    """Not one of the errors SQS's model lists: the JSON protocol names it by the service framework's
    exception, and SDKs read the Query code from `x-amzn-query-error`."""
    return SqsError("InvalidParameterValueException", message, query_code="InvalidParameterValue",
                    namespace=CORAL)


def missing_parameter(name: str) -> SqsError:
    return SqsError("MissingRequiredParameterException", f"The request must contain the parameter {name}.",
                    query_code="MissingParameter", namespace=CORAL)


def empty_in_batch(name: str) -> SqsError:
    """A batch's entry whose parameter is given empty: SQS fails the entry alone with `EmptyValue`."""
    return SqsError("EmptyValue", f"The request must contain the parameter {name}.")


def missing_in_batch(name: str) -> SqsError:
    """A batch's entry that lacks what the queue needs: the same words, answered as an invalid value."""
    return invalid_parameter(f"The request must contain the parameter {name}.")


def invalid_redrive_policy(policy: str, reason: str) -> SqsError:
    return invalid_value(policy, "RedrivePolicy", reason)


def out_of_range(value: Any, parameter: str, least: int, most: int) -> SqsError:
    """A receive's or a send's integer outside its range, as SQS words it for each parameter."""
    reasons = {"MaxNumberOfMessages": f"Must be between {least} and {most}, if provided.",
               "DelaySeconds": f"DelaySeconds must be >= {least} and <= {most}."}
    return invalid_value(value, parameter, reasons.get(parameter, f"Must be >= {least} and <= {most}, if provided."))


def visibility_beyond_limit(value: Any, most: int) -> SqsError:
    """ChangeMessageVisibility past the 12 hours a message may stay hidden since it was received."""
    return invalid_value(value, "VisibilityTimeout",
                         f"Total VisibilityTimeout for the message is beyond the limit [{most} seconds]")


def invalid_attribute_name(message: str) -> SqsError:
    return SqsError("InvalidAttributeName", message)


def unknown_attribute(name: str) -> SqsError:
    return invalid_attribute_name(f"Unknown Attribute {str(name)[:256]}.")


def fifo_only_attribute(name: str) -> SqsError:
    """DeduplicationScope or FifoThroughputLimit on a standard queue (SQS's own wording for those two)."""
    return invalid_attribute_name(f"You can specify the {name} only when FifoQueue is set to true.")


def invalid_attribute_value(message: str) -> SqsError:
    return SqsError("InvalidAttributeValue", message)


def attribute_value(name: str, reason: str | None = None) -> SqsError:
    text = f"Invalid value for the parameter {name}."
    return invalid_attribute_value(f"{text} Reason: {reason}" if reason else text)


# ---- messages ---------------------------------------------------------------------------------


def invalid_contents(message: str) -> SqsError:
    return SqsError("InvalidMessageContents", message)


ALLOWED_CHARACTERS = "#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]"


def invalid_character(character: str) -> SqsError:
    """A message body holding a character outside XML's (SQS names the first)."""
    return invalid_contents(f"Invalid binary character '#x{ord(character):X}' was found in the message body, the "
                            f"set of allowed characters is {ALLOWED_CHARACTERS}.")


def invalid_attribute_character(name: str, character: str) -> SqsError:
    """The same in a message attribute's value, which SQS answers as InvalidParameterValue."""
    return invalid_parameter(f"Invalid binary character '#x{ord(character):X}' was found in the value of message "
                             f"(user) attribute '{name[:256]}', the set of allowed characters is "
                             f"{ALLOWED_CHARACTERS}.")


def message_too_long(limit: int, *, in_batch: bool = False) -> SqsError:
    """A message over the queue's MaximumMessageSize: a batch's entry is worded as SQS words it there."""
    verb = "cannot be validated" if in_batch else "are invalid"
    return invalid_parameter(f"One or more parameters {verb}. Reason: Message must be shorter than {limit} bytes.")


def invalid_attribute_type(name: str) -> SqsError:
    return invalid_parameter(f"The type of message (user) attribute '{name[:256]}' is invalid. You must use only "
                             "the following supported type prefixes: Binary, Number, String.")


def empty_attribute_value(name: str, data_type: str) -> SqsError:
    return invalid_parameter(f"Message (user) attribute '{name[:256]}' must contain a non-empty value of type "
                             f"'{data_type}'.")


def fifo_id(value: Any, parameter: str) -> SqsError:
    """A MessageGroupId, MessageDeduplicationId or ReceiveRequestAttemptId SQS does not take."""
    return invalid_value(value, parameter,
                         f"{parameter} can only include alphanumeric and punctuation characters. 1 to 128 in length.")


def no_deduplication_id() -> SqsError:
    return invalid_parameter("The queue should either have ContentBasedDeduplication enabled or "
                             "MessageDeduplicationId provided explicitly")


def not_for_queue_type(value: Any, parameter: str) -> SqsError:
    return invalid_value(value, parameter, "The request include parameter that is not valid for this queue type.")


def receipt_invalid(handle: str) -> SqsError:
    """A handle SQS never issued: 404, as SQS's model declares it and SQS answers it."""
    return SqsError("ReceiptHandleIsInvalid",
                    f'The input receipt handle "{handle[:200]}" is not a valid receipt handle.', status=404)


def receipt_expired(handle: str) -> SqsError:
    return invalid_parameter(f"Value {handle[:200]} for parameter ReceiptHandle is invalid. Reason: The receipt "
                             "handle has expired.")


def message_gone(handle: str) -> SqsError:
    """ChangeMessageVisibility of a message deleted (or otherwise no longer in the queue)."""
    return invalid_value(handle, "ReceiptHandle",
                         "Message does not exist or is not available for visibility timeout change.")


def not_in_flight() -> SqsError:
    return SqsError("MessageNotInflight", "The message referred to isn't in flight.",
                    query_code=_simple("MessageNotInflight"))


# ---- batches ----------------------------------------------------------------------------------


def empty_batch(entries: str) -> SqsError:
    return SqsError("EmptyBatchRequest", f"There should be at least one {entries} in the request.",
                    query_code=_simple("EmptyBatchRequest"))


def too_many_entries(n: int) -> SqsError:
    return SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are 10. You have sent {n}.",
                    query_code=_simple("TooManyEntriesInBatchRequest"))


def ids_not_distinct(entry_id: str) -> SqsError:
    return SqsError("BatchEntryIdsNotDistinct", f"Id {entry_id[:80]} repeated.",
                    query_code=_simple("BatchEntryIdsNotDistinct"))


def invalid_entry_id(entry_id: str) -> SqsError:
    return SqsError("InvalidBatchEntryId",
                    "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
                    "It can be at most 80 letters long.", query_code=_simple("InvalidBatchEntryId"))


def batch_too_long(total: int, limit: int) -> SqsError:
    return SqsError("BatchRequestTooLong",
                    f"Batch requests cannot be longer than {limit} bytes. You have sent {total} bytes.",
                    query_code=_simple("BatchRequestTooLong"))


# ---- limits and what Postbox does not offer ------------------------------------------------------


def over_limit(message: str) -> SqsError:
    return SqsError("OverLimit", message, status=403)


def unsupported(message: str) -> SqsError:
    return SqsError("UnsupportedOperation", message, query_code=_simple("UnsupportedOperation"))


def purge_in_progress(name: str) -> SqsError:
    return SqsError("PurgeQueueInProgress", f"Only one PurgeQueue operation on {name} is allowed every 60 seconds.",
                    status=403, query_code=_simple("PurgeQueueInProgress"))


def resource_not_found(message: str) -> SqsError:
    return SqsError("ResourceNotFoundException", message, status=404)


def access_denied(message: str) -> SqsError:
    return SqsError("AccessDeniedException", message, query_code="AccessDenied", namespace=CORAL)


# ---- authentication (the answers every AWS service gives) -----------------------------------


def missing_token() -> SqsError:
    return SqsError("MissingAuthenticationTokenException", "Request is missing Authentication Token",
                    status=403, query_code="MissingAuthenticationToken", namespace=CORAL)


def incomplete_signature(message: str) -> SqsError:
    return SqsError("IncompleteSignatureException", message, query_code="IncompleteSignature", namespace=CORAL)


def unknown_key() -> SqsError:
    return SqsError("UnrecognizedClientException", "The security token included in the request is invalid.",
                    status=403, query_code="InvalidClientTokenId", namespace=CORAL)


def bad_signature(message: str | None = None) -> SqsError:
    return SqsError(
        "InvalidSignatureException",
        message or "The request signature we calculated does not match the signature you provided. Check your "
        "AWS Secret Access Key and signing method. Consult the service documentation for details.",
        status=403, query_code="SignatureDoesNotMatch", namespace=CORAL)


def expired(message: str) -> SqsError:
    return SqsError("InvalidSignatureException", message, query_code="RequestExpired", namespace=CORAL)


class NoOperation(SqsError):
    """A Query request naming no action: SQS answers 404 with a bare `<UnknownOperationException/>`."""

    def __init__(self) -> None:
        super().__init__("UnknownOperationException", "", status=404, namespace=CORAL)


def unknown_action(action: str) -> SqsError:
    return SqsError("UnknownOperationException", f"The action {action[:100]} is not valid for this endpoint.",
                    query_code="InvalidAction", namespace=CORAL)


def empty_json() -> SqsError:
    """Coral's answer to a JSON request without a body (a presigned URL made by a JSON client): no message."""
    return SqsError("SerializationException", "", query_code="MalformedQueryString", namespace=CORAL)


def malformed(message: str) -> SqsError:
    return SqsError("SerializationException", message, query_code="MalformedQueryString", namespace=CORAL)
