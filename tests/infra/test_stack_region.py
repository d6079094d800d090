"""A cell in another AWS region (issue #42): a provider there, its own VPC peered with the stack's,
routes and security-group rules across the peering, its database made there; its schedules,
migration run and db-app secret (replicated there) stay in the stack's region with the functions."""

from __future__ import annotations

import json
import re

import pytest
from stack_harness import ACCOUNT, REGION, Recorded, StackRun, run_stack

from functions import schedules as agent_table

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")

FAR = "eu-west-1"
CELL = "postbox:cell:Cell"
PROVIDER = "pulumi:providers:aws"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
ROUTE = "aws:ec2/route:Route"
FUNCTION = "aws:lambda/function:Function"
FAR_CELL = {"aws:region": REGION, "cells": [{"name": "cell-1"}, {"name": "cell-2", "region": FAR, "maxAcu": 8}]}
HOME_SUBNETS = ["10.42.0.0/20", "10.42.16.0/20"]  # the functions' (the default vpcCidr, two AZs)


@pytest.fixture(scope="module")
def far() -> StackRun:
    return run_stack("prod", FAR_CELL)


def _provider(run: StackRun) -> Recorded:
    (provider,) = [r for r in run.of_type(PROVIDER) if r.name == "cell-2-aws"]
    return provider


def _env(fn: Recorded) -> dict[str, str]:
    return fn.inputs["environment"]["variables"]


def _fns(run: StackRun) -> dict[str, Recorded]:
    return {_env(f)["POWERTOOLS_SERVICE_NAME"]: f for f in run.of_type(FUNCTION)}


def test_the_cell_has_a_provider_for_its_region(far: StackRun):
    provider = _provider(far)
    assert provider.inputs["region"] == FAR
    assert f"::{CELL}$" in provider.urn  # the cell's own
    assert [r.name for r in far.of_type(PROVIDER) if r.inputs.get("region") == FAR] == ["cell-2-aws"]


def test_the_cells_provider_tags_as_the_stacks_default_provider_does():
    tags = {"tags": {"team": "queues"}}
    run = run_stack("prod", {**FAR_CELL, "aws:defaultTags": tags})
    given = _provider(run).inputs["defaultTags"]
    assert (json.loads(given) if isinstance(given, str) else given) == tags


def test_its_vpc_has_private_subnets_there_in_a_cidr_of_its_own(far: StackRun):
    vpc = far.one("aws:ec2/vpc:Vpc", "cell-2-vpc")
    assert (vpc.region, vpc.inputs["cidrBlock"]) == (FAR, "10.43.0.0/16")  # the block after the stack's
    assert vpc.inputs["tags"] == {"Name": "postbox-prod-cell-2"}
    subnets = sorted((r for r in far.of_type("aws:ec2/subnet:Subnet") if r.name.startswith("cell-2-")),
                     key=lambda r: r.name)
    assert [(r.name, r.region, r.inputs["cidrBlock"], r.inputs["availabilityZone"]) for r in subnets] == [
        ("cell-2-private-0", FAR, "10.43.0.0/20", f"{FAR}a"), ("cell-2-private-1", FAR, "10.43.16.0/20", f"{FAR}b")]
    assert all(r.inputs["vpcId"] == vpc.id and not r.inputs["mapPublicIpOnLaunch"] for r in subnets)
    # The stack's own VPC is as it was.
    home = far.one("aws:ec2/vpc:Vpc", "vpc")
    assert (home.region, home.inputs["cidrBlock"]) == (REGION, "10.42.0.0/16")
    assert not far.of_type("aws:ec2/internetGateway:InternetGateway")


def test_the_vpcs_are_peered_from_the_stacks_region_and_accepted_in_the_cells(far: StackRun):
    peering = far.one("aws:ec2/vpcPeeringConnection:VpcPeeringConnection", "cell-2-peering")
    assert peering.region == REGION
    assert (peering.inputs["vpcId"], peering.inputs["peerVpcId"]) == ("vpc-postbox", "vpc-cell-2-vpc")
    assert peering.inputs["peerRegion"] == FAR and not peering.inputs.get("autoAccept")
    accepter = far.one("aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter", "cell-2-peering-accepter")
    assert accepter.region == FAR
    assert accepter.inputs["vpcPeeringConnectionId"] == peering.id and accepter.inputs["autoAccept"]


def test_each_side_routes_the_others_cidr_over_the_peering(far: StackRun):
    routes = {(r.region, r.inputs["routeTableId"], r.inputs["destinationCidrBlock"]): r.inputs["vpcPeeringConnectionId"]
              for r in far.of_type(ROUTE)}
    accepter = far.one("aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter", "cell-2-peering-accepter")
    assert routes == {(REGION, "rtb-main", "10.43.0.0/16"): "pcx-cell-2-peering",
                      (FAR, "rtb-cell-2-vpc", "10.42.0.0/16"): accepter.id}


def test_the_functions_subnets_may_reach_the_cells_proxy_and_cluster_and_nothing_else(far: StackRun):
    groups = {r.name: r for r in far.of_type("aws:ec2/securityGroup:SecurityGroup")}
    for name in ("cell-2-proxy", "cell-2-db", "cell-2-endpoints"):
        assert (groups[name].region, groups[name].inputs["vpcId"]) == (FAR, "vpc-cell-2-vpc")

    def into(sg: str) -> list[tuple]:
        return sorted((r.region, r.inputs.get("cidrIpv4") or r.inputs["referencedSecurityGroupId"],
                       r.inputs["fromPort"]) for r in far.of_type(INGRESS) if r.inputs["securityGroupId"] == sg)

    assert into("sg-cell-2-proxy") == [(FAR, cidr, 5432) for cidr in HOME_SUBNETS]
    assert into("sg-cell-2-db") == sorted([(FAR, cidr, 5432) for cidr in HOME_SUBNETS]
                                          + [(FAR, "sg-cell-2-proxy", 5432)])
    assert into("sg-cell-2-endpoints") == [(FAR, cidr, 443) for cidr in HOME_SUBNETS]
    # The functions' group may leave for the cell's VPC on those two ports only.
    out = sorted((r.region, r.inputs["fromPort"], r.inputs["toPort"]) for r in far.of_type(EGRESS)
                 if r.inputs["securityGroupId"] == "sg-functions" and r.inputs.get("cidrIpv4") == "10.43.0.0/16")
    assert out == [(REGION, 443, 443), (REGION, 5432, 5432)]


def test_the_cells_database_is_made_there_in_its_vpc(far: StackRun):
    made_there = {(r.typ, r.name) for r in far.resources if r.region == FAR}
    for typ, name in (("aws:rds/cluster:Cluster", "cell-2-db"),
                      ("aws:rds/clusterInstance:ClusterInstance", "cell-2-db-0"),
                      ("aws:rds/proxy:Proxy", "cell-2-db"), ("aws:rds/proxyTarget:ProxyTarget", "cell-2-db"),
                      ("aws:rds/subnetGroup:SubnetGroup", "cell-2-db"),
                      ("aws:rds/proxyDefaultTargetGroup:ProxyDefaultTargetGroup", "cell-2-db")):
        assert (typ, name) in made_there, f"{typ} {name} is not in {FAR}"
    subnet_group = far.one("aws:rds/subnetGroup:SubnetGroup", "cell-2-db")
    proxy = far.one("aws:rds/proxy:Proxy", "cell-2-db")
    assert subnet_group.inputs["subnetIds"] == proxy.inputs["vpcSubnetIds"] == [
        "subnet-cell-2-private-0", "subnet-cell-2-private-1"]
    # The first cell's stays where it was.
    assert far.one("aws:rds/cluster:Cluster", "db").region == REGION
    assert far.one("aws:rds/proxy:Proxy", "db").inputs["vpcSubnetIds"] == ["subnet-private-0", "subnet-private-1"]


def test_its_schedules_and_migration_run_stay_with_the_functions(far: StackRun):
    kinds = ("aws:scheduler/schedule:Schedule", "aws:scheduler/scheduleGroup:ScheduleGroup",
             "aws:lambda/invocation:Invocation")
    mine = [r for r in far.resources if r.name.startswith("cell-2-") and r.typ in kinds]
    assert len(mine) == len(agent_table.AGENTS) + 2
    assert {r.region for r in mine} == {REGION}


def test_its_db_app_secret_is_rotated_at_home_and_read_there_by_its_proxy(far: StackRun):
    secret = far.one("aws:secretsmanager/secret:Secret", "cell-2-db-app")
    assert secret.region == REGION and secret.inputs["replicas"] == [{"region": FAR}]
    assert "replicas" not in far.one("aws:secretsmanager/secret:Secret", "db-app").inputs
    rotation = far.one("aws:secretsmanager/secretRotation:SecretRotation", "cell-2-rotate-db-app")
    assert rotation.region == REGION and rotation.inputs["secretId"] == secret.id
    assert rotation.inputs["rotationLambdaArn"] == f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:postbox-prod-migrate"
    replica = secret.outputs["arn"].replace(f":{REGION}:", f":{FAR}:")
    proxy = far.one("aws:rds/proxy:Proxy", "cell-2-db")
    read = {a["secretArn"] for a in proxy.inputs["auths"]}
    assert replica in read and secret.outputs["arn"] not in read
    assert all(f":{FAR}:" in arn for arn in read)  # the master user's secret (RDS's) is there too
    policy = far.one("aws:iam/rolePolicy:RolePolicy", "cell-2-proxy")
    assert set(policy.policy()["Statement"][0]["Resource"]) == read


def test_the_functions_are_told_the_cells_region_and_may_log_in_there(far: StackRun):
    fns = _fns(far)
    for name, fn in fns.items():
        listed = {c["name"]: c for c in json.loads(_env(fn)["POSTBOX_CELLS"])}
        assert "region" not in listed["cell-1"] and listed["cell-2"]["region"] == FAR
        # Only the migrate function reads the cell's master secret, through that region's endpoint.
        endpoint = listed["cell-2"].get("secrets_endpoint")
        assert endpoint == (f"https://vpce-cell-2-endpoint-secretsmanager.secretsmanager.{FAR}.vpce.amazonaws.com"
                            if name == "migrate" else None)
        assert "secrets_endpoint" not in listed["cell-1"]
    endpoint = far.one("aws:ec2/vpcEndpoint:VpcEndpoint", "cell-2-endpoint-secretsmanager")
    assert endpoint.region == FAR and endpoint.inputs["serviceName"] == f"com.amazonaws.{FAR}.secretsmanager"
    assert endpoint.inputs["subnetIds"] == ["subnet-cell-2-private-0", "subnet-cell-2-private-1"]
    roles = {r.id: r.name.removeprefix("role-") for r in far.of_type("aws:iam/role:Role")}
    for policy in far.of_type("aws:iam/rolePolicy:RolePolicy"):
        statements = {st["Sid"]: st["Resource"] for st in policy.policy()["Statement"] if "Sid" in st}
        fn = roles.get(policy.inputs["role"])
        if fn == "migrate":
            assert any(f":{FAR}:" in arn for arn in statements["DbMasterSecret"])
        elif "DbConnectAsApp" in statements:
            assert sorted(a.split(":")[3] for a in statements["DbConnectAsApp"]) == sorted([REGION, FAR])


def test_its_alarms_watch_it_there_and_notify_a_topic_there(far: StackRun):
    alarms = {r.name: r for r in far.of_type("aws:cloudwatch/metricAlarm:MetricAlarm")}
    topic = far.one("aws:sns/topic:Topic", "cell-2-alarms")
    assert topic.region == FAR
    for name in ("cell-2-db-cpu", "cell-2-db-acu", "cell-2-db-connections", "cell-2-proxy-pinned"):
        assert alarms[name].region == FAR and alarms[name].inputs["alarmActions"] == [topic.outputs["arn"]]
    assert alarms["db-cpu"].region == REGION and alarms["db-cpu"].inputs["alarmActions"] == [
        far.one("aws:sns/topic:Topic", "alarms").outputs["arn"]]
    assert far.exports["cells"]["cell-2"]["alarm_topic_arn"] == topic.outputs["arn"]
    assert far.exports["cells"]["cell-2"]["vpc_cidr"] == "10.43.0.0/16"


def test_a_cell_in_the_stacks_region_gets_no_provider_vpc_or_peering():
    run = run_stack("prod", {"aws:region": REGION, "cells": [{"name": "a"}, {"name": "b", "region": REGION}]})
    assert not [r for r in run.of_type(PROVIDER) if r.inputs.get("region")]
    assert [r.name for r in run.of_type("aws:ec2/vpc:Vpc")] == ["vpc"]
    assert not run.of_type("aws:ec2/vpcPeeringConnection:VpcPeeringConnection") and not run.of_type(ROUTE)
    assert {r.region for r in run.resources} == {REGION}


def test_a_cidr_of_its_own_is_taken_from_config():
    run = run_stack("prod", {"aws:region": REGION, "cells": [
        {"name": "a"}, {"name": "b", "region": FAR, "vpcCidr": "172.20.0.0/16"}]})
    assert run.one("aws:ec2/vpc:Vpc", "b-vpc").inputs["cidrBlock"] == "172.20.0.0/16"
    assert {r.inputs["destinationCidrBlock"] for r in run.of_type(ROUTE)} == {"172.20.0.0/16", "10.42.0.0/16"}


@pytest.mark.parametrize(("cells", "reason"), [
    ([{"name": "a"}, {"name": "b", "region": FAR, "vpcCidr": "10.42.128.0/17"}],
     "b's VPC 10.42.128.0/17 overlaps the stack's VPC (10.42.0.0/16)"),
    ([{"name": "a"}, {"name": "b", "region": FAR, "vpcCidr": "10.44.0.0/16"}, {"name": "c", "region": "eu-west-2"}],
     "c's VPC 10.44.0.0/16 overlaps cell b's VPC (10.44.0.0/16)"),  # c's derived block is b's
    ([{"name": "a"}, {"name": "b", "region": FAR, "vpcCidr": "10.50.0.0/16"},
      {"name": "c", "region": FAR, "vpcCidr": "10.50.32.0/19"}], "c's VPC 10.50.32.0/19 overlaps cell b's VPC"),
    ([{"name": "a"}, {"name": "b", "vpcCidr": "10.50.0.0/16"}], "vpcCidr is only for a cell in another region"),
    ([{"name": "a"}, {"name": "b", "region": FAR, "vpcCidr": "10.50.0.1/16"}], "vpcCidr must be an IPv4 network"),
    ([{"name": "a"}, {"name": "b", "region": FAR, "vpcCidr": "10.50.0.0/24"}], "must be /16 to /20"),
    ([{"name": "a", "region": FAR}, {"name": "b"}], "the first cell (a) is the stack's database"),
], ids=["overlaps-the-stack", "derived-overlaps-another", "two-overlap", "same-region", "not-a-network", "too-small",
        "first-elsewhere"])
def test_cells_elsewhere_are_refused_with_the_reason(cells, reason):
    with pytest.raises(Exception, match=re.escape(reason)):
        run_stack("prod", {"aws:region": REGION, "cells": cells})


def test_the_dashboard_shows_each_cells_database_in_its_region(far: StackRun):
    (board,) = far.of_type("aws:cloudwatch/dashboard:Dashboard")
    by_title = {w["properties"]["title"]: w for w in json.loads(board.inputs["dashboardBody"])["widgets"]}
    for cell, cluster, region in (("cell-1", "postbox-prod", REGION), ("cell-2", "postbox-prod-cell-2", FAR)):
        widget = by_title[f"database {cell}: capacity (ACU) and CPU"]["properties"]
        assert widget["region"] == region
        assert ["AWS/RDS", "ServerlessDatabaseCapacity", "DBClusterIdentifier", cluster] in widget["metrics"]
        pinned = by_title[f"proxy {cell}: clients, database connections, pinned"]["properties"]
        assert pinned["region"] == region and pinned["metrics"][0] == ["AWS/RDS", "ClientConnections", "ProxyName",
                                                                        cluster]
