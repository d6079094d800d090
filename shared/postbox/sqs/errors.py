"""SQS's errors: the name SDKs branch on (the JSON `__type`), the older Query code they also read
(the `x-amzn-query-error` header) and the HTTP status, as SQS answers them."""

from __future__ import annotations

from ..errors import PostboxError

SQS = "com.amazonaws.sqs"
CORAL = "com.amazon.coral.service"


class SqsError(PostboxError):
    """One of SQS's error answers: `kind` names the `__type`, `query_code` the header's code."""

    def __init__(self, kind: str, message: str, *, status: int = 400, query_code: str | None = None,
                 namespace: str = SQS, fault: str = "Sender") -> None:
        super().__init__(message, code=query_code or kind)
        self.status = status
        self.kind = kind
        self.namespace = namespace
        self.fault = fault

    @property
    def query_code(self) -> str:
        return self.code


def _simple(kind: str) -> str:
    return f"AWS.SimpleQueueService.{kind}"


def no_queue() -> SqsError:
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.",
                    query_code=_simple("NonExistentQueue"))


def queue_exists(message: str) -> SqsError:
    return SqsError("QueueNameExists", message, query_code="QueueAlreadyExists")


def throttled(message: str) -> SqsError:
    """SQS's answer to a request over a rate or a count it allows (SDKs retry it, after Retry-After)."""
    return SqsError("RequestThrottled", message)


def invalid_parameter(message: str) -> SqsError:
    return SqsError("InvalidParameterValueException", message, query_code="InvalidParameterValue")


def missing_parameter(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.",
                    query_code="MissingParameter")


def invalid_attribute_name(message: str) -> SqsError:
    return SqsError("InvalidAttributeName", message)


def invalid_attribute_value(message: str) -> SqsError:
    return SqsError("InvalidAttributeValue", message)


def invalid_contents(message: str) -> SqsError:
    return SqsError("InvalidMessageContents", message)


def receipt_invalid(handle: str) -> SqsError:
    return SqsError("ReceiptHandleIsInvalid",
                    f'The input receipt handle "{handle[:200]}" is not a valid receipt handle.')


def receipt_expired(handle: str) -> SqsError:
    return invalid_parameter(f"Value {handle[:200]} for parameter ReceiptHandle is invalid. Reason: The receipt "
                             "handle has expired.")


def not_in_flight() -> SqsError:
    return SqsError("MessageNotInflight", "The message referred to isn't in flight.",
                    query_code=_simple("MessageNotInflight"))


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


def unknown_action(action: str) -> SqsError:
    return SqsError("UnknownOperationException", f"The action {action[:100]} is not valid for this endpoint.",
                    query_code="InvalidAction", namespace=CORAL)


def empty_json() -> SqsError:
    """Coral's answer to a JSON request without a body (a presigned URL made by a JSON client): no message."""
    return SqsError("SerializationException", "", query_code="MalformedQueryString", namespace=CORAL)


def malformed(message: str) -> SqsError:
    return SqsError("SerializationException", message, query_code="MalformedQueryString", namespace=CORAL)
