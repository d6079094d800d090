"""The two secrets the stack owns, and their rotation by the `migrate` function.

* `db-app`: the application role's login (`postbox_app`, DML and EXECUTE only). RDS Proxy logs in
  to the database with it; the functions never read it (they reach the proxy with IAM tokens).
* `encryption-keys`: the key ring that seals encrypted partitioned-queue payloads and SQS
  credentials' secrets, and keys SQS receipt handles' seals; every key ever current is kept, so a
  rotation never loses an old message nor voids a handle given out.

Neither secret gets a value from Pulumi: the first migrate run gives each its first value, and
Secrets Manager calls the migrate function to rotate them on a schedule (functions/rotation.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.settings import Settings


@dataclass
class Secrets:
    app: aws.secretsmanager.Secret
    keys: aws.secretsmanager.Secret


def build(s: Settings) -> Secrets:
    recovery = 0 if s.stack == "dev" else 7  # dev stacks come and go; elsewhere a delete can be undone

    def secret(name: str, description: str) -> aws.secretsmanager.Secret:
        return aws.secretsmanager.Secret(
            name, name=f"{s.prefix}/{name}", description=description, recovery_window_in_days=recovery
        )

    return Secrets(
        app=secret("db-app", "Postbox: the postbox_app database role's login (RDS Proxy reads it)"),
        keys=secret("encryption-keys", "Postbox: payload encryption key ring (current key + every older one)"),
    )


def rotate(s: Settings, secrets: Secrets, migrate_fn: aws.lambda_.Function, after: pulumi.Resource) -> None:
    """Rotation schedules; created after the migration run that gave both secrets their first value."""
    permission = aws.lambda_.Permission(
        "secretsmanager-invoke-migrate",
        action="lambda:InvokeFunction",
        function=migrate_fn.name,
        principal="secretsmanager.amazonaws.com",
    )
    for name, secret, days in (
        ("db-app", secrets.app, s.app_secret_rotation_days),
        ("encryption-keys", secrets.keys, s.encryption_key_rotation_days),
    ):
        aws.secretsmanager.SecretRotation(
            f"rotate-{name}",
            secret_id=secret.id,
            rotation_lambda_arn=migrate_fn.arn,
            rotation_rules=aws.secretsmanager.SecretRotationRotationRulesArgs(automatically_after_days=days),
            rotate_immediately=False,
            opts=pulumi.ResourceOptions(depends_on=[permission, after]),
        )
