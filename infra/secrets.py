"""The two secrets the stack owns, and their rotation by the `migrate` function.

* `db-app`: the application role's login (`postbox_app`, DML and EXECUTE only). RDS Proxy logs in
  to the database with it; the functions never read it (they reach the proxy with IAM tokens).
* `encryption-keys`: the key ring that seals encrypted partitioned-queue payloads and SQS
  credentials' secrets, and keys SQS receipt handles' seals; every key ever current is kept, so a
  rotation never loses an old message nor voids a handle given out.

Neither secret gets a value from Pulumi: the first migrate run gives each its first value, and
Secrets Manager calls the migrate function to rotate them on a schedule (functions/rotation.py).

Each cell has its own `db-app` secret (its proxy's login to its cluster), given its first value by
the cell's migration run (a cell in another region reads a replica of it: `app_secret`); the key
ring is the stack's, one for every cell, so a tenant's sealed payloads and handles open on
whichever cell it is moved to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.placement import Cell
from infra.settings import Settings


@dataclass
class Secrets:
    keys: aws.secretsmanager.Secret  # the stack's; each cell holds its own db-app secret


def _secret(s: Settings, name: str, physical: str, description: str,
            opts: pulumi.ResourceOptions | None = None, **more: Any) -> aws.secretsmanager.Secret:
    recovery = 0 if s.stack == "dev" else 7  # dev stacks come and go; elsewhere a delete can be undone
    return aws.secretsmanager.Secret(name, name=physical, description=description, recovery_window_in_days=recovery,
                                     opts=opts, **more)


def build(s: Settings) -> Secrets:
    return Secrets(keys=_secret(s, "encryption-keys", f"{s.prefix}/encryption-keys",
                                "Postbox: payload encryption key ring (current key + every older one)"))


def app_secret(s: Settings, cell: Cell) -> aws.secretsmanager.Secret:
    """The cell's postbox_app login: `<prefix>/db-app` for the first cell, `<prefix>/<cell>/db-app` after.

    Always in the stack's region: Secrets Manager only calls a rotation function of the secret's own
    region, and the migrate function that rotates it is there. A cell in another region gets a
    replica of it there, which its proxy reads (Secrets Manager copies each new value to it)."""
    physical = f"{s.prefix}/db-app" if cell.first else f"{s.prefix}/{cell.spec.name}/db-app"
    of = "" if cell.first else f" (cell {cell.spec.name})"
    there = {"replicas": [aws.secretsmanager.SecretReplicaArgs(region=cell.spec.region)]} if cell.provider else {}
    return _secret(s, cell.logical("db-app"), physical,
                   f"Postbox: the postbox_app database role's login (RDS Proxy reads it){of}", cell.opts(), **there)


def proxy_reads(cell: Cell) -> pulumi.Output[str]:
    """The ARN of the db-app secret the cell's proxy reads: its replica in the cell's region (the
    same name and suffix, another region) when the cell is in another region."""
    arn = cell.app_secret.arn
    if not cell.provider:
        return arn
    region = cell.spec.region
    return arn.apply(lambda a: ":".join([*a.split(":")[:3], region, *a.split(":")[4:]]))


def invoke_permission(migrate_fn: aws.lambda_.Function) -> aws.lambda_.Permission:
    """Secrets Manager may call the migrate function, which rotates every secret the stack owns."""
    return aws.lambda_.Permission(
        "secretsmanager-invoke-migrate",
        action="lambda:InvokeFunction",
        function=migrate_fn.name,
        principal="secretsmanager.amazonaws.com",
    )


def rotation(name: str, secret: aws.secretsmanager.Secret, days: int, migrate_fn: aws.lambda_.Function,
             opts: pulumi.ResourceOptions) -> aws.secretsmanager.SecretRotation:
    """A rotation schedule; `opts` make it wait for the migration run that gave the secret its first
    value (and for `invoke_permission`)."""
    return aws.secretsmanager.SecretRotation(
        name,
        secret_id=secret.id,
        rotation_lambda_arn=migrate_fn.arn,
        rotation_rules=aws.secretsmanager.SecretRotationRotationRulesArgs(automatically_after_days=days),
        rotate_immediately=False,
        opts=opts,
    )


def rotate(s: Settings, secrets: Secrets, cells: list[Cell], migrate_fn: aws.lambda_.Function) -> None:
    """Every rotation schedule: each cell's db-app secret, and the key ring after the first cell's run."""
    permission = invoke_permission(migrate_fn)
    for cell in cells:
        rotation(cell.logical("rotate-db-app"), cell.app_secret, s.app_secret_rotation_days, migrate_fn,
                 cell.opts(depends_on=[permission, cell.migration]))
    rotation("rotate-encryption-keys", secrets.keys, s.encryption_key_rotation_days, migrate_fn,
             pulumi.ResourceOptions(depends_on=[permission, cells[0].migration]))
