"""Ours (not moto's): the pytest plugin that runs moto's own SQS tests in its server mode against
Postbox's SQS endpoint, in the pytest process that test_moto_sqs_suite.py starts.

moto's server mode sends every boto3 client to `TEST_SERVER_MODE_ENDPOINT` (our `<base>/sqs`) and,
when a `mock_aws` context starts, resets the server with `POST /moto-api/reset`. Postbox has no such
route: here the reset deletes the tenant's queues instead, so each test starts with an empty account
as it does on moto (through the queues API: a deletion through SQS would hold each name for SQS's
minute, QueueDeletedRecently, where moto's reset forgets every queue at once); and `mock_aws` keeps
the environment's credential (a Postbox credential minted for the run) where it would set moto's fake
one. The random queue names moto's tests draw from uuid4 start with a letter here, as a Postbox queue
name must; nothing else of a test is changed. moto's conftest is not loaded (`--noconftest`): its
`account_id` fixture asks moto's STS; ours answers the tenant's account id. The tests not run, and
why, are listed once, in `moto_excluded.EXCLUDED`.
"""

from __future__ import annotations

import json
import os
import uuid

import boto3
import httpx
import moto.core.models
import pytest
from moto.core.config import default_user_config
from moto_excluded import excluded_file, excluded_reason


def _sqs():
    return boto3.session.Session().client(
        "sqs", region_name=os.environ["AWS_DEFAULT_REGION"], endpoint_url=os.environ["TEST_SERVER_MODE_ENDPOINT"])


def delete_every_queue() -> None:
    """moto's reset, on Postbox: every queue of the tenant deleted (through the queues API, which leaves
    a name free at once). Queues that name a dead-letter queue lose their RedrivePolicy first (Postbox
    keeps a dead-letter queue while a queue names it)."""
    sqs = _sqs()
    urls = [url for page in sqs.get_paginator("list_queues").paginate(MaxResults=1000)
            for url in page.get("QueueUrls", [])]
    for url in urls:
        policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
        if policy.get("Attributes", {}).get("RedrivePolicy"):
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    with httpx.Client(base_url=os.environ["POSTBOX_QUEUES_URL"], headers={"apikey": os.environ["POSTBOX_API_KEY"]},
                      timeout=60) as api:
        for url in urls:
            api.delete(f"/{url.rsplit('/', 1)[-1]}").raise_for_status()


def pytest_configure(config):
    for name in ("TEST_SERVER_MODE_ENDPOINT", "AWS_ACCESS_KEY_ID", "POSTBOX_ACCOUNT_ID", "POSTBOX_QUEUES_URL",
                 "POSTBOX_API_KEY"):
        if not os.environ.get(name):
            pytest.exit(f"{name} is not set: run moto's SQS tests through tests/sqs_moto/test_moto_sqs_suite.py", 2)
    moto.core.models.ServerModeMockAWS.reset = lambda self: delete_every_queue()
    default_user_config["core"]["mock_credentials"] = False  # keep our credential, not moto's FOOBARKEY
    uuid.uuid4 = lettered_uuid4  # before moto's test modules import it (some draw names at collection)


def pytest_ignore_collect(collection_path, config):
    """Whole files excluded are not even imported (test_server.py needs Flask, moto's server)."""
    return True if excluded_file(collection_path.name) else None


_uuid4 = uuid.uuid4


def lettered_uuid4() -> uuid.UUID:
    """A random uuid whose text starts with a letter: moto's tests name queues `str(uuid4())[0:6]`, and
    a Postbox queue name starts with a letter (a name SQS allows but Postbox cannot keep is refused)."""
    while True:
        drawn = _uuid4()
        if str(drawn)[0].isalpha():
            return drawn


def pytest_collection_modifyitems(session, config, items):
    """Excluded tests are deselected; which, and why, goes to POSTBOX_MOTO_DESELECTED for the report."""
    keep, drop = [], []
    why: dict[str, list[str]] = {}
    for item in items:
        reason = excluded_reason(item.nodeid)
        (drop if reason else keep).append(item)
        if reason:
            why.setdefault(reason, []).append(item.nodeid)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if os.environ.get("POSTBOX_MOTO_DESELECTED"):
        with open(os.environ["POSTBOX_MOTO_DESELECTED"], "w") as out:
            json.dump(why, out)


@pytest.fixture
def account_id() -> str:
    """The account id of the tenant whose credential signs the requests (moto's asks its STS)."""
    return os.environ["POSTBOX_ACCOUNT_ID"]
