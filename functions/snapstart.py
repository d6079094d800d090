"""SnapStart: what a function does before Lambda snapshots its initialised environment, and after each
restore from that snapshot, so that no restored environment uses what belonged to the one snapshotted.

Before the snapshot: close the database pool and the LISTEN connection (their sockets would not
survive a restore, and the database would see one session shared by many environments). After a
restore: reseed `random` (every restored environment would draw the same numbers), forget the AWS
clients (their credentials were the snapshotted environment's), the database secret, the IAM
tokens and the payload key ring (read afresh at first use), and open the pool again, whose first
connections start in the background.

The hooks are registered with `snapshot_restore_py`, which Lambda's Python runtime ships (and
`functions.lambda_runtime` runs the same way), only when the environment is initialised for a
snapshot (AWS_LAMBDA_INITIALIZATION_TYPE `snap-start`): elsewhere nothing is imported.
"""

from __future__ import annotations

import os
import random
from typing import Any

SNAP_START = "snap-start"
_registered = False


def before_snapshot() -> None:
    from postbox import db

    db.close_pool()  # the listener's connection goes with it


def after_restore() -> None:
    from postbox import aws, config, db
    from postbox.partitioned import payloads

    random.seed()
    config.reset()
    aws.reset()
    db.forget_credentials()
    payloads.forget_ring()
    db.pool()


def register() -> bool:
    """Register the hooks once, if this environment is initialised for a snapshot; whether they are."""
    global _registered
    if _registered or os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") != SNAP_START:
        return _registered
    from snapshot_restore_py import register_after_restore, register_before_snapshot

    register_before_snapshot(before_snapshot)
    register_after_restore(after_restore)
    _registered = True
    return True


def run_before_snapshot() -> None:
    """The registered before-snapshot hooks, last registered first (as Lambda's runtime runs them)."""
    from snapshot_restore_py import get_before_snapshot

    hooks = get_before_snapshot()
    while hooks:
        func, args, kwargs = hooks.pop()
        func(*args, **kwargs)


def run_after_restore() -> None:
    """The registered after-restore hooks, in the order they were registered."""
    from snapshot_restore_py import get_after_restore

    for func, args, kwargs in get_after_restore():
        func(*args, **kwargs)


def snapshot_and_restore(api: Any) -> None:
    """The snapshot protocol for a runtime of our own (`functions.lambda_runtime`): the hooks before,
    the wait for the restore (`/restore/next`), the hooks after; a failure is reported as Lambda's
    runtime reports it, and ends the process."""
    try:
        run_before_snapshot()
        api.restore_next()
    except Exception as error:
        api.error("/init/error", error)
        raise SystemExit(64) from error
    try:
        run_after_restore()
    except Exception as error:
        api.error("/restore/error", error)
        raise SystemExit(65) from error
