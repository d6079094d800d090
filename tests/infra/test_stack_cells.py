"""Cells in the Pulumi program (issue #42): a stack without `cells:` deploys what it did before
cells; a stack with two cells has two of everything a cell is, and every function serves both."""

from __future__ import annotations

import json
import re

import pytest
from no_cells_snapshot import FILE, FUNCTION, snapshot
from stack_harness import Recorded, StackRun, run_stack

from functions import routes as route_table
from functions import schedules as agent_table

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")

CELL = "postbox:cell:Cell"
CLUSTER = "aws:rds/cluster:Cluster"
PROXY = "aws:rds/proxy:Proxy"
SCHEDULE = "aws:scheduler/schedule:Schedule"
INVOCATION = "aws:lambda/invocation:Invocation"
SG = "aws:ec2/securityGroup:SecurityGroup"
AGENT = agent_table.AGENTS[0].name
TWO_CELLS = {"cells": [{"name": "cell-1"}, {"name": "east", "minAcu": 1, "maxAcu": 16}]}


@pytest.fixture(scope="module")
def two() -> StackRun:
    return run_stack("prod", TWO_CELLS)


def children(run: StackRun) -> set[tuple[str, str]]:
    """(type, name) of the resources cells' components hold (a child's URN names its parent's type)."""
    return {(r.typ, r.name) for r in run.resources if f"::{CELL}$" in r.urn}


def environment(fn: Recorded) -> dict[str, str]:
    return fn.inputs["environment"]["variables"]


# --- a stack without cells: ---------------------------------------------------------------------


def test_a_stack_without_cells_has_the_resources_it_had_before_cells(prod: StackRun):
    """Every resource main deployed before cells is here under its URN or an alias of it, one each;
    nothing else but the one cell's component (no cloud resource)."""
    before = json.loads(FILE.read_text())
    found: dict[str, list[str]] = {}
    for r in prod.resources:
        for urn in {r.urn, *r.aliases} & set(before["urns"]):
            found.setdefault(urn, []).append(r.urn)
    assert sorted(found) == before["urns"], "resources gone or renamed without an alias"
    assert all(len(now) == 1 for now in found.values())
    new = [r for r in prod.resources if not ({r.urn, *r.aliases} & set(before["urns"]))]
    assert [(r.typ, r.name, r.custom) for r in new] == [(CELL, "cell-1", False)]


def test_a_stack_without_cells_has_the_names_inputs_and_environments_it_had(prod: StackRun):
    before = json.loads(FILE.read_text())
    now = snapshot(prod)
    old_urn = {r.urn: next(u for u in (r.urn, *r.aliases) if u in before["urns"]) for r in prod.resources if r.custom}
    for part in ("names", "inputs", "environments"):
        renamed = {old_urn[urn]: value for urn, value in now[part].items()}
        for urn, value in before[part].items():
            assert renamed.get(urn) == value, f"{part} of {urn} changed"
        assert set(renamed) == set(before[part])


def test_a_stack_without_cells_names_no_cell_anywhere(prod: StackRun):
    for fn in prod.of_type(FUNCTION):
        assert "POSTBOX_CELLS" not in environment(fn)
    for schedule in prod.of_type(SCHEDULE):
        assert "cell" not in json.loads(schedule.inputs["target"]["input"])
    (run,) = prod.of_type(INVOCATION)
    assert "cell" not in json.loads(run.inputs["input"])
    assert list(prod.exports["cells"]) == ["cell-1"]


# --- two cells ---------------------------------------------------------------------------------


def test_two_cells_are_two_components_each_with_a_cluster_and_a_proxy(two: StackRun):
    assert sorted(c.name for c in two.of_type(CELL)) == ["cell-1", "east"]
    clusters = {r.name: r for r in two.of_type(CLUSTER)}
    assert set(clusters) == {"db", "east-db"}
    # The first cell is the database the stack had: same names; the second its own.
    assert clusters["db"].inputs["clusterIdentifier"] == "postbox-prod"
    assert clusters["east-db"].inputs["clusterIdentifier"] == "postbox-prod-east"
    scaling = clusters["east-db"].inputs["serverlessv2ScalingConfiguration"]
    assert (scaling["minCapacity"], scaling["maxCapacity"]) == (1, 16)
    assert clusters["db"].inputs["serverlessv2ScalingConfiguration"] == {"minCapacity": 0.5, "maxCapacity": 4}
    assert sorted(p.inputs["name"] for p in two.of_type(PROXY)) == ["postbox-prod", "postbox-prod-east"]
    held = children(two)
    for prefix in ("", "east-"):  # the first cell's children keep the names they had
        for typ, name in ((CLUSTER, "db"), (PROXY, "db"), ("aws:rds/clusterInstance:ClusterInstance", "db-0"),
                          ("aws:rds/proxyTarget:ProxyTarget", "db"), ("aws:secretsmanager/secret:Secret", "db-app"),
                          ("aws:secretsmanager/secretRotation:SecretRotation", "rotate-db-app"),
                          (SG, "proxy"), (SG, "db"), (INVOCATION, "migrate"), (SCHEDULE, f"schedule-{AGENT}")):
            assert (typ, prefix + name) in held, f"a cell lacks its {typ} {prefix}{name}"


def test_each_cells_proxy_logs_in_with_its_own_secrets_behind_its_own_groups(two: StackRun):
    proxies = {p.name: p for p in two.of_type(PROXY)}
    secrets = {s.name: s.outputs["arn"] for s in two.of_type("aws:secretsmanager/secret:Secret")}
    assert secrets["east-db-app"] != secrets["db-app"]
    assert {a["secretArn"] for a in proxies["east-db"].inputs["auths"]} >= {secrets["east-db-app"]}
    assert secrets["db-app"] not in {a["secretArn"] for a in proxies["east-db"].inputs["auths"]}
    assert proxies["east-db"].inputs["vpcSecurityGroupIds"] == ["sg-east-proxy"]
    assert two.one(CLUSTER, "east-db").inputs["vpcSecurityGroupIds"] == ["sg-east-db"]
    ingress = [r for r in two.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
               if r.inputs["securityGroupId"] == "sg-east-db"]
    assert sorted(r.inputs["referencedSecurityGroupId"] for r in ingress) == ["sg-east-proxy", "sg-functions"]


def test_every_agent_has_a_schedule_per_cell_naming_the_cell(two: StackRun):
    by_cell: dict[str, set[str]] = {}
    for schedule in two.of_type(SCHEDULE):
        event = json.loads(schedule.inputs["target"]["input"])
        by_cell.setdefault(event["cell"], set()).add(event["agent"])
        in_group = schedule.inputs.get("groupName")
        assert in_group == ("postbox-prod-east" if event["cell"] == "east" else None)
    agents = {a.name for a in agent_table.AGENTS}
    assert by_cell == {"cell-1": agents, "east": agents}
    # Schedules of one agent share its name, each cell's in its own group.
    assert len({(s.inputs.get("groupName"), s.inputs["name"]) for s in two.of_type(SCHEDULE)}) == 2 * len(agents)


def test_the_migrate_function_runs_once_per_cell_before_any_other_function(two: StackRun):
    runs = {json.loads(r.inputs["input"])["cell"]: r for r in two.of_type(INVOCATION)}
    assert set(runs) == {"cell-1", "east"}
    assert {r.inputs["functionName"] for r in runs.values()} == {"postbox-prod-migrate"}


def test_every_function_is_told_both_cells(two: StackRun):
    proxies = {p.name: p.outputs["endpoint"] for p in two.of_type(PROXY)}
    fns = {environment(f)["POWERTOOLS_SERVICE_NAME"]: f for f in two.of_type(FUNCTION)}
    assert set(fns) == {*route_table.FUNCTIONS, "migrate", *(a.name for a in agent_table.AGENTS)}
    for name, fn in fns.items():
        listed = json.loads(environment(fn)["POSTBOX_CELLS"])
        assert [c["name"] for c in listed] == ["cell-1", "east"]
        assert [c["weight"] for c in listed] == [4, 16]
        assert {c["db_host"] for c in listed} == set(proxies.values())
        assert all(c["listen_host"] for c in listed)
        assert all(("db_secret_arn" in c) == (name == "migrate") for c in listed)
    secrets = json.loads(environment(fns["migrate"])["POSTBOX_CELL_APP_SECRETS"])
    assert set(secrets) == {"cell-1", "east"}


def test_every_function_may_log_in_to_both_cells_and_no_more(two: StackRun):
    roles = {r.id: r.name.removeprefix("role-") for r in two.of_type("aws:iam/role:Role")}
    surfaces = set(route_table.FUNCTIONS)
    for policy in two.of_type("aws:iam/rolePolicy:RolePolicy"):
        fn = roles.get(policy.inputs["role"])
        if fn is None or not fn or policy.name.startswith(("scheduler-", "proxy", "east-proxy")):
            continue
        by_sid = {st["Sid"]: st for st in policy.policy()["Statement"]}
        if fn == "migrate":
            assert len(by_sid["DbMasterSecret"]["Resource"]) == 2
            assert len(by_sid["RotateSecrets"]["Resource"]) == 3  # two db-app secrets and the key ring
        elif "DbConnectAsApp" in by_sid:
            assert len(set(by_sid["DbConnectAsApp"]["Resource"])) == 2
            assert all(r.endswith("/postbox_app") for r in by_sid["DbConnectAsApp"]["Resource"])
        if fn in surfaces:
            assert len(set(by_sid["DbListen"]["Resource"])) == 2


# --- config refused ----------------------------------------------------------------------------


@pytest.mark.parametrize(("cells", "reason"), [
    ([], "non-empty list"),
    ({"name": "a"}, "non-empty list"),
    (["cell-1"], "must be a mapping"),
    ([{"name": "Cell_1"}], "name must be 1-32 of a-z"),
    ([{"name": "1cell"}], "name must be 1-32 of a-z"),
    ([{"name": "a" * 33}], "name must be 1-32 of a-z"),
    ([{"name": "a"}, {"name": "a"}], "two cells are named a"),
    ([{"name": "a", "maxAcus": 8}], "unknown key maxAcus"),
    ([{"name": "a", "minAcu": 8, "maxAcu": 4}], "minAcu <= maxAcu"),
    ([{"name": "a", "minAcu": 0, "maxAcu": 0}], "maxAcu > 0"),
    ([{"name": "a", "maxAcu": 512}], "maxAcu <= 256"),
    ([{"name": "a", "maxAcu": "lots"}], "maxAcu must be a number"),
    ([{"name": "a", "region": "Europe"}], "region must be an AWS region"),
    ([{"name": "a"}] * 1 + [{"name": f"c{i}"} for i in range(8)], "at most 8"),
    ([{"name": "a"}, {"name": "b" * 32}], "over RDS Proxy's 60 characters"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_cells_are_refused_with_the_reason(cells, reason):
    with pytest.raises(Exception, match=re.escape(reason)):
        run_stack("prod", {"cells": cells, "namePrefix": "postbox-a-rather-long-stack-name"})


def test_a_cell_naming_a_region_needs_the_stacks_known(monkeypatch):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(Exception, match="set aws:region"):
        run_stack("prod", {"aws:region": "", "cells": [{"name": "a"}, {"name": "b", "region": "eu-west-1"}]})


def test_a_cell_in_the_stacks_region_says_so_and_is_built_as_any_other():
    """(A cell in another region: tests/infra/test_stack_region.py.)"""
    run = run_stack("prod", {"aws:region": "us-east-1", "cells": [{"name": "a"}, {"name": "b", "region": "us-east-1"}]})
    listed = json.loads(environment(run.of_type(FUNCTION)[0])["POSTBOX_CELLS"])
    assert [c.get("region") for c in listed] == [None, "us-east-1"]
    assert run.exports["cells"]["b"]["region"] == "us-east-1"
