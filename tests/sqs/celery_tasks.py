"""A Celery app on Postbox's SQS endpoint through kombu's SQS transport, configured as a user would
(broker URL with the credential, region, plain HTTP): the worker and the producer of the Celery
tests import it. Each task appends a line to a file, so the test counts every run."""

from __future__ import annotations

import os
import time
from urllib.parse import quote

from celery import Celery

app = Celery("postbox_sqs_tests")
app.conf.update(
    broker_url="sqs://{}:{}@{}".format(quote(os.environ["PB_SQS_KEY"], safe=""),
                                       quote(os.environ["PB_SQS_SECRET"], safe=""), os.environ["PB_SQS_HOSTPORT"]),
    broker_transport_options={
        "region": "us-east-1", "is_secure": False, "wait_time_seconds": 1, "polling_interval": 0.2,
        "visibility_timeout": int(os.environ.get("PB_SQS_VISIBILITY", "30")),
        "queue_name_prefix": os.environ.get("PB_SQS_PREFIX", ""),
    },
    task_default_queue=os.environ.get("PB_SQS_QUEUE", "celery"),
    task_acks_late=True,  # a task's message is deleted when it has run: a worker killed mid-task leaves it
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    result_backend=None,
    task_ignore_result=True,
)


def _record(line: str) -> None:
    with open(os.environ["PB_SQS_RECORD"], "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


@app.task(name="record")
def record(n: int) -> None:
    _record(f"ran {n}")


@app.task(name="slow")
def slow(n: int, seconds: float) -> None:
    """Runs for `seconds` the first time it starts, at once when it has started before."""
    path = os.environ["PB_SQS_RECORD"]
    before = 0
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            before = f.read().count(f"started {n}\n")
    _record(f"started {n}")
    if before == 0:
        time.sleep(seconds)
    _record(f"done {n}")
