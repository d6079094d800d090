"""Run the migrations on deploy: one invocation of the `migrate` function per schema change.

The invocation's input carries a sha256 of the SQL under shared/postbox/sql/ (table migrations and
functions files), so Pulumi re-invokes the function exactly when one of those files was added or
changed (and on the first deploy), after the function (with the new domain layer) and the database
behind the proxy exist. A failed migration fails `pulumi up`. Applying is idempotent (table
migrations recorded, functions files applied only when their checksum changed, advisory lock), so
a re-run is harmless.

One invocation per cell, the cell's child: on a stack with `cells:` its input names the cell
(`{"cell": name}`) and the function migrates that cell alone; a stack without `cells:` invokes it
as it always did (its one cell). A cell in another region's run also waits for the way there (the
accepted peering, its routes and rules).
"""

from __future__ import annotations

import json

import pulumi_aws as aws

from infra.artifacts import migrations_sha256
from infra.cells import Cell
from infra.functions import Deployed


def build(fn: Deployed, cell: Cell, named: bool) -> aws.lambda_.Invocation:
    """The cell's migration run (`named`: the stack has `cells:`, so the input names the cell)."""
    digest = migrations_sha256()
    cell.migration = aws.lambda_.Invocation(
        cell.logical("migrate"),
        function_name=fn.function.name,
        input=json.dumps({"action": "migrate", "migrations_sha256": digest,
                          **({"cell": cell.spec.name} if named else {})}),
        triggers={"migrations_sha256": digest},
        opts=cell.opts(depends_on=[fn.function, *cell.db.ready, *(cell.peered.ready if cell.peered else [])]),
    )
    return cell.migration
