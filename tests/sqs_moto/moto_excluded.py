"""moto's SQS tests (tests/test_sqs of moto's sdist) that cannot mean anything against Postbox, grouped by
why. Every other test of that folder runs against Postbox's SQS endpoint and must pass.

An entry is a file (`test_sqs.py`), a test (`test_sqs.py::test_name`, all its parameters) or one case of
a test (`test_sqs.py::test_name[case]`).
"""

from __future__ import annotations

EXCLUDED: dict[str, list[str]] = {
    "moto's own server internals: it drives moto's Flask app in process, not an endpoint": [
        "test_server.py",
    ],
    "CloudFormation stacks, which Postbox does not serve": [
        "test_sqs_cloudformation.py",
    ],
    "moto's Lambda and its event source mappings reading a queue, not an SQS behaviour": [
        "test_sqs_integration.py",
    ],
    "other AWS accounts reached through STS AssumeRole: a Postbox credential is one tenant's": [
        "test_sqs_multiaccount.py",
    ],
    "IAM policies enforced on SQS actions: Postbox grants by the credential's role": [
        "test_sqs_authentication.py",
    ],
    "moto skips it in server mode (it reads moto's backend, freezes moto's clock or sets moto's environment)": [
        "test_sqs.py::test_set_attributes_integer_fields_conversion",
        "test_sqs.py::test_change_message_visibility_than_permitted",
        "test_sqs.py::test_purge_queue_twice_allowed_when_strict_behaviour_disabled",
        "test_sqs.py::test_purge_queue_allowed_after_60_seconds",
        "test_sqs.py::test_batch_change_message_visibility",
        "test_sqs.py::test_queue_with_dlq",
        "test_sqs.py::test_receive_messages_with_message_group_id_on_visibility_timeout",
        "test_sqs.py::test_list_queues_limits_to_1000_queues",
        "test_sqs.py::test_fifo_queue_send_duplicate_messages_after_deduplication_time_limit",
    ],
    "signs for a region other than the endpoint's: a Postbox deployment serves one region and refuses a "
    "signature scoped to another (SignatureDoesNotMatch), as an AWS endpoint does": [
        "test_sqs.py::test_create_queues_in_multiple_region",
        "test_sqs.py::test_get_queue_with_prefix",
        "test_sqs.py::test_receive_message_with_xml_content",
        "test_sqs.py::test_get_queue_attributes_no_param",
        "test_sqs.py::test_message_becomes_inflight_when_received",
        "test_sqs.py::test_send_message_to_fifo_without_message_group_id",
        "test_sqs.py::test_maximum_message_size_attribute_default",
        "test_sqs.py::test_maximum_message_size_attribute_fails_for_invalid_values",
        "test_sqs.py::test_send_message_fails_when_message_size_greater_than_max_message_size",
    ],
    "asserts moto's account id 123456789012 in a queue URL or ARN (a tenant's account id is its own)": [
        "test_sqs.py::test_get_queue_attributes",
        "test_sqs.py::test_receive_message_using_name_should_return_name_as_url",
    ],
    "moto takes what SQS refuses: an attribute named 'VisibilityTimeout ' (with a space), "
    "MessageRetentionPeriod 1 (SQS: 60 at least), FifoQueue 'tru', a MessageDeduplicationId on a "
    "standard queue, FifoQueue 'false' on a standard queue (SQS: Unknown Attribute FifoQueue, as recorded on "
    "AWS)": [
        "test_sqs.py::test_create_fifo_queue_with_dlq",
        "test_sqs.py::test_receive_message_with_explicit_visibility_timeout",
        "test_sqs.py::test_change_message_visibility",
        "test_sqs.py::test_queue_length",
        "test_sqs.py::test_delete_batch_operation",
        "test_sqs.py::test_delete_message_after_visibility_timeout",
        "test_sqs.py::test_message_retention_period",
        "test_sqs.py::test_create_queue_with_different_attributes_fail",
        "test_sqs.py::test_message_delay_is_more_than_15_minutes",
    ],
    "asserts only the wording of an error message moto wrote (the code is the same; these tests are not "
    "verified against AWS)": [
        "test_sqs.py::test_message_with_invalid_attributes",
        "test_sqs.py::test_message_with_attributes_invalid_datatype",
        "test_sqs.py::test_change_message_visibility_on_unknown_receipt_handle",
        "test_sqs.py::test_delete_message_errors",
        "test_sqs.py::test_send_message_batch_reports_an_invalid_delay_per_entry",
        "test_sqs.py::test_tag_queue_errors",
        "test_sqs.py::test_untag_queue_errors",
    ],
    "a FIFO batch entry with no MessageGroupId: moto answers MissingParameter, SQS InvalidParameterValue "
    "with the same words (recorded against SQS in LocalStack's AWS-validated snapshots); moto's test is not "
    "verified against AWS": [
        "test_sqs.py::test_send_messages_to_fifo_without_message_group_id",
    ],
    "the policy AddPermission writes and RemovePermission's refusal as moto writes them (Version 2012-10-17, "
    "\"can't find label on existing policy.\"); SQS writes Version 2008-10-17 and answers \"can't find label.\" "
    "(as recorded on AWS), and so does Postbox": [
        "test_sqs.py::test_permissions",
        "test_sqs.py::test_remove_permission_errors",
    ],
    "a receipt handle of an earlier receive: stale for ChangeMessageVisibility, as documented and as SQS answers "
    "(InvalidParameterValue) in users' reports; moto takes it, and its test is not verified against AWS": [
        "test_sqs.py::test_change_message_visibility_on_old_message",
        "test_sqs.py::test_batch_change_message_visibility_on_old_message",
    ],
}


def whole_files() -> set[str]:
    return {entry for entries in EXCLUDED.values() for entry in entries if "::" not in entry}


def excluded_file(name: str) -> bool:
    """Whether a whole file of tests/test_sqs/ is excluded."""
    return name in whole_files()


def excluded_entry(nodeid: str) -> str | None:
    """The entry that excludes a test (a pytest node id under tests/test_sqs/), or None when it runs."""
    full = nodeid.split("tests/test_sqs/", 1)[-1]
    name = full.split("[", 1)[0]
    for entries in EXCLUDED.values():
        for entry in entries:
            if entry in (full, name) or ("::" not in entry and name.startswith(entry + "::")):
                return entry
    return None


def excluded_reason(nodeid: str) -> str | None:
    """Why a test is excluded, or None when it runs."""
    entry = excluded_entry(nodeid)
    return next((reason for reason, entries in EXCLUDED.items() if entry in entries), None)
