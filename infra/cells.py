"""Cells: each an Aurora cluster of its own with its proxy, security groups, db-app secret and its
rotation, its migration run and a schedule per agent, as one component (`postbox:cell:Cell`).

One set of functions and one API serve every cell: each function is told the cells
(`POSTBOX_CELLS`, see `environment`) and may log in to each cell's proxy and cluster. The stack's
`cells:` config lists them, the first the default (it holds the tenant directory); a stack without
`cells:` has one, `cell-1`, built from the database settings.

The first cell's resources keep the names a stack had before cells (the component's children, with
an alias to where they were: at the root of the stack), so a stack without `cells:` deploys exactly
what it did, and adding `cells:` to a stack keeps its database as the first cell. Later cells' logical
names are `<cell>-<name>`, their physical names `<prefix>-<cell>...`.

A cell whose `region` is not the stack's is built there with a provider of its own
(`Cell.in_region`): its own VPC (the stack's shape, its CIDR from settings), peered with the stack's
VPC, which the functions (always in the stack's region) cross to reach its proxy and cluster. Its
schedules and migration run stay in the stack's region with the functions they invoke, and its
db-app secret too (rotated there, replicated to the cell's region for its proxy: infra/secrets.py).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

from infra import database, network, secrets
from infra.network import Network
from infra.settings import CellSpec, Settings

TYPE = "postbox:cell:Cell"


class Cell(pulumi.ComponentResource):
    def __init__(self, s: Settings, spec: CellSpec, first: bool, net: Network) -> None:
        super().__init__(TYPE, spec.name, None, None)
        self.spec, self.first = spec, first
        self.physical = s.prefix if first else f"{s.prefix}-{spec.name}"  # cluster, proxy, instances
        # A cell in another region: a provider there, and a VPC of its own peered with the stack's.
        self.provider = _provider(self) if spec.remote(s.region) else None
        self.peered = network.peer(s, self, net) if self.provider else None
        self.proxy_sg, self.db_sg = network.cell_groups(self, net, self.peered)
        self.app_secret = secrets.app_secret(s, self)
        self.db = database.build(s, self, (self.peered or net).subnet_ids, secrets.proxy_reads(self),
                                 self.db_sg, self.proxy_sg)
        self.migration: pulumi.Resource | None = None  # its migration run (infra/migrate.py)
        self.alarm_topic: aws.sns.Topic | None = None  # its region's alarms topic, if another region's
        self.register_outputs({"proxy_endpoint": self.db.endpoint, "cluster_endpoint": self.db.cluster_endpoint})

    def logical(self, name: str) -> str:
        """The Pulumi name of one of its resources: today's for the first cell, `<cell>-<name>` after."""
        return name if self.first else f"{self.spec.name}-{name}"

    def opts(self, **options: Any) -> pulumi.ResourceOptions:
        """A child's options, in the stack's region (its schedules, its migration run, the requester
        side of a peering); the first cell's children were once at the stack's root."""
        aliases = [pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)] if self.first else None
        return pulumi.ResourceOptions(parent=self, aliases=aliases, **options)

    def in_region(self, **options: Any) -> pulumi.ResourceOptions:
        """A child's options in the cell's own region (its VPC, groups, cluster and proxy): with the
        cell's provider when it is in another region, else as `opts`."""
        return self.opts(provider=self.provider, **options) if self.provider else self.opts(**options)

    def outputs(self) -> pulumi.Output[dict[str, str]]:
        """What the stack's `cells` output says of it."""
        return pulumi.Output.all(
            proxy_endpoint=self.db.endpoint, cluster_endpoint=self.db.cluster_endpoint,
            db_secret_arn=self.db.secret_arn, db_app_secret_arn=self.app_secret.arn,
            **({"alarm_topic_arn": self.alarm_topic.arn} if self.alarm_topic else {}),
        ).apply(lambda o: {**o, "max_acu": self.spec.max_acu,
                           **({"region": self.spec.region} if self.spec.region else {}),
                           **({"vpc_cidr": self.spec.vpc_cidr} if self.peered else {})})


def _provider(cell: Cell) -> aws.Provider:
    """The cell's region's provider. An explicit provider reads none of the stack's `aws:` config,
    so it is given what the default one would use of it: the profile and the default tags."""
    stack = pulumi.Config("aws")
    return aws.Provider(cell.logical("aws"), region=cell.spec.region, profile=stack.get("profile"),
                        default_tags=stack.get_object("defaultTags"), opts=pulumi.ResourceOptions(parent=cell))


def build(s: Settings, net: Network) -> list[Cell]:
    return [Cell(s, spec, i == 0, net) for i, spec in enumerate(s.cells)]


def environment(cells: list[Cell], *, with_secrets: bool) -> pulumi.Output[str]:
    """POSTBOX_CELLS (postbox.cells): each cell's name, proxy endpoint (`db_host`), cluster endpoint
    (`listen_host`, for LISTEN and for testing a rotated password), region (IAM tokens are signed
    for it) and weight (its max ACU: new tenants go where there is most room); `db_secret_arn`, the
    master user's, only for the migrate function (`with_secrets`), the one function that logs in
    with it, and for a cell in another region the Secrets Manager endpoint it reads it through."""

    def entry(cell: Cell) -> pulumi.Output[dict]:
        parts = {"db_host": cell.db.endpoint, "listen_host": cell.db.cluster_endpoint}
        if with_secrets:
            parts["db_secret_arn"] = cell.db.secret_arn
            if cell.peered:  # that region's Secrets Manager, reached over the peering
                parts["secrets_endpoint"] = cell.peered.secrets_url
        fixed = {"name": cell.spec.name, **({"region": cell.spec.region} if cell.spec.region else {}),
                 "weight": cell.spec.max_acu}
        return pulumi.Output.all(**parts).apply(lambda p: {"name": fixed["name"], **p, **fixed})

    return pulumi.Output.all(*[entry(c) for c in cells]).apply(lambda e: json.dumps(list(e), separators=(",", ":")))


def app_secrets(cells: list[Cell]) -> pulumi.Output[str]:
    """POSTBOX_CELL_APP_SECRETS of the migrate function: each cell's db-app secret by cell name (it
    fills and rotates each on its own cell)."""
    return pulumi.Output.all(*[c.app_secret.arn for c in cells]).apply(
        lambda arns: json.dumps({c.spec.name: a for c, a in zip(cells, arns, strict=True)}, separators=(",", ":")))


def schedule_group(s: Settings, cell: Cell) -> aws.scheduler.ScheduleGroup | None:
    """Later cells' schedules are in a group of their own, where each keeps its agent's name; the
    first cell's are in the default group, as the stack's were before cells."""
    if cell.first:
        return None
    return aws.scheduler.ScheduleGroup(cell.logical("schedules"), name=f"{s.prefix}-{cell.spec.name}",
                                       opts=cell.opts())
