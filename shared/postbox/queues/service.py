"""Queues: the public verbs of the queues surface, one unit of work (one transaction) each.

The work is split by job: `catalog` (access, finding, documents, metrics), `settings` (create,
change, delete within the plan) and `messages` (send, read, archive, browse).
"""

from __future__ import annotations

from .catalog import get_queue, list_queues, queue_history, queue_metrics
from .messages import (
    MAX_HEADERS_BYTES,
    archive_messages,
    browse_messages,
    delete_message,
    delete_messages,
    pop_messages,
    purge_queue,
    read_messages,
    send_messages,
    set_visibility,
)
from .settings import CONSUMER_DEFAULTS, DEFAULT_VT, NAME, create_queue, delete_queue, patch_queue

__all__ = [
    "CONSUMER_DEFAULTS", "DEFAULT_VT", "MAX_HEADERS_BYTES", "NAME",
    "archive_messages", "browse_messages", "create_queue", "delete_message", "delete_messages",
    "delete_queue", "get_queue", "list_queues", "patch_queue", "pop_messages", "purge_queue",
    "queue_history", "queue_metrics", "read_messages", "send_messages", "set_visibility",
]
