"""What a stack without `cells:` deploys, as main deployed it before cells: its resources' URNs, their
physical names, and the inputs cells touch (the database, its network and secrets, the schedules,
the migration run, every function's environment and IAM policy).

`test_stack_cells.py` compares today's program with `no_cells_prod.json`, written by this script from the
program before cells (`python tests/infra/no_cells_snapshot.py`, run in that tree). Regenerate it when
a change meant to change a stack without cells lands (a new route, a new agent), and say so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stack_harness import Recorded, StackRun, run_stack  # noqa: E402

FILE = Path(__file__).resolve().parent / "no_cells_prod.json"
# The resources whose inputs a cell is made of (or that name a cell's resources).
CELL_TYPES = {
    "aws:rds/cluster:Cluster", "aws:rds/clusterInstance:ClusterInstance", "aws:rds/proxy:Proxy",
    "aws:rds/proxyDefaultTargetGroup:ProxyDefaultTargetGroup", "aws:rds/proxyTarget:ProxyTarget",
    "aws:rds/subnetGroup:SubnetGroup", "aws:ec2/securityGroup:SecurityGroup",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "aws:secretsmanager/secret:Secret",
    "aws:secretsmanager/secretRotation:SecretRotation", "aws:scheduler/schedule:Schedule",
    "aws:lambda/invocation:Invocation", "aws:iam/rolePolicy:RolePolicy", "aws:cloudwatch/metricAlarm:MetricAlarm",
}  # fmt: skip
FUNCTION = "aws:lambda/function:Function"


def _stable(r: Recorded) -> dict[str, Any]:
    """Its inputs, the migrations' digest (which changes with every migration) left out."""
    inputs = dict(r.inputs)
    if r.typ == "aws:lambda/invocation:Invocation":
        inputs["input"] = {k: v for k, v in json.loads(inputs["input"]).items() if k != "migrations_sha256"}
        inputs.pop("triggers", None)
    return json.loads(json.dumps(inputs, sort_keys=True, default=str))


def snapshot(run: StackRun) -> dict[str, Any]:
    custom = [r for r in run.resources if r.custom]
    return {
        "urns": sorted(r.urn for r in custom),
        "names": {r.urn: r.inputs.get("name") or r.inputs.get("identifier") or r.inputs.get("clusterIdentifier")
                  for r in custom},
        "inputs": {r.urn: _stable(r) for r in custom if r.typ in CELL_TYPES},
        "environments": {r.urn: r.inputs["environment"]["variables"] for r in custom if r.typ == FUNCTION},
    }


if __name__ == "__main__":
    FILE.write_text(json.dumps(snapshot(run_stack("prod")), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FILE}")
