"""Run the migrations on deploy: one invocation of the `migrate` function per schema change.

The invocation's input carries a sha256 of the SQL under shared/postbox/sql/ (table migrations and
functions files), so Pulumi re-invokes the function exactly when one of those files was added or
changed (and on the first deploy), after the function (with the new domain layer) and the database
behind the proxy exist. A failed migration fails `pulumi up`. Applying is idempotent (table
migrations recorded, functions files applied only when their checksum changed, advisory lock), so
a re-run is harmless.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.artifacts import migrations_sha256
from infra.database import Database
from infra.functions import Deployed


def build(fn: Deployed, db: Database) -> aws.lambda_.Invocation:
    digest = migrations_sha256()
    return aws.lambda_.Invocation(
        "migrate",
        function_name=fn.function.name,
        input=json.dumps({"action": "migrate", "migrations_sha256": digest}),
        triggers={"migrations_sha256": digest},
        opts=pulumi.ResourceOptions(depends_on=[fn.function, *db.ready]),
    )
