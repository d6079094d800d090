"""The VPC: private subnets only, reached from outside through API Gateway alone.

No internet gateway and no NAT: the functions talk to RDS Proxy inside the VPC and to the two AWS
APIs they call (Secrets Manager for the DB credentials and keys, Lambda for consumer dispatch, STS
for the dispatcher's per-tenant sessions)
through interface endpoints, and to S3 (GDPR exports) through a gateway endpoint. Security groups
chain functions -> proxy -> database on 5432, plus functions -> database on 5432 for the long polls'
LISTEN connections (the proxy would pin them), functions -> S3's prefix list on 443, and nothing else.
Each cell has its own proxy and database groups (`cell_groups`), the first cell's under today's names.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.placement import Cell
from infra.settings import Settings

PG_PORT = 5432
# AWS APIs the functions call from inside the VPC (`com.amazonaws.<region>.<service>`).
ENDPOINT_SERVICES = ("secretsmanager", "lambda", "sts")


@dataclass
class Network:
    vpc: aws.ec2.Vpc
    subnets: list[aws.ec2.Subnet]
    functions_sg: aws.ec2.SecurityGroup
    endpoints_sg: aws.ec2.SecurityGroup

    @property
    def subnet_ids(self) -> list[pulumi.Output[str]]:
        return [s.id for s in self.subnets]


def _sg(name: str, vpc: aws.ec2.Vpc, description: str, opts: pulumi.ResourceOptions | None = None
        ) -> aws.ec2.SecurityGroup:
    # No inline rules: the provider then removes AWS's default allow-all egress, and every rule
    # below is its own resource, so no rule exists that this file does not show.
    return aws.ec2.SecurityGroup(name, vpc_id=vpc.id, description=description, tags={"Name": name}, opts=opts)


def _allow(name: str, *, into: aws.ec2.SecurityGroup, source: aws.ec2.SecurityGroup, port: int, what: str,
           opts: pulumi.ResourceOptions | None = None) -> None:
    """`source` may open TCP `port` on `into`: an ingress rule on one side, egress on the other."""
    aws.vpc.SecurityGroupIngressRule(
        f"{name}-in",
        security_group_id=into.id,
        referenced_security_group_id=source.id,
        ip_protocol="tcp",
        from_port=port,
        to_port=port,
        description=what,
        opts=opts,
    )
    aws.vpc.SecurityGroupEgressRule(
        f"{name}-out",
        security_group_id=source.id,
        referenced_security_group_id=into.id,
        ip_protocol="tcp",
        from_port=port,
        to_port=port,
        description=what,
        opts=opts,
    )


def build(s: Settings) -> Network:
    vpc = aws.ec2.Vpc(
        "vpc",
        cidr_block=s.vpc_cidr,
        enable_dns_support=True,
        enable_dns_hostnames=True,  # needed for the endpoints' private DNS names
        tags={"Name": s.prefix},
    )
    azs = aws.get_availability_zones_output(state="available")
    blocks = list(ipaddress.ip_network(s.vpc_cidr).subnets(new_prefix=20))
    subnets = [
        aws.ec2.Subnet(
            f"private-{i}",
            vpc_id=vpc.id,
            cidr_block=str(blocks[i]),
            availability_zone=azs.names.apply(lambda names, i=i: names[i]),
            map_public_ip_on_launch=False,
            tags={"Name": f"{s.prefix}-private-{i}"},
        )
        for i in range(s.az_count)
    ]

    functions_sg = _sg("functions", vpc, "Postbox Lambda functions")
    endpoints_sg = _sg("endpoints", vpc, "Interface endpoints: 443 from the functions only")

    _allow(
        "functions-to-endpoints",
        into=endpoints_sg,
        source=functions_sg,
        port=443,
        what="functions -> AWS APIs",
    )

    region = aws.get_region_output().region
    for service in ENDPOINT_SERVICES:
        aws.ec2.VpcEndpoint(
            f"endpoint-{service}",
            vpc_id=vpc.id,
            service_name=region.apply(lambda r, svc=service: f"com.amazonaws.{r}.{svc}"),
            vpc_endpoint_type="Interface",
            private_dns_enabled=True,
            subnet_ids=[sn.id for sn in subnets],
            security_group_ids=[endpoints_sg.id],
            tags={"Name": f"{s.prefix}-{service}"},
        )

    # S3 (the GDPR export bucket) through a gateway endpoint on the route table the subnets use.
    s3 = aws.ec2.VpcEndpoint(
        "endpoint-s3",
        vpc_id=vpc.id,
        service_name=region.apply(lambda r: f"com.amazonaws.{r}.s3"),
        vpc_endpoint_type="Gateway",
        route_table_ids=[vpc.main_route_table_id],
        tags={"Name": f"{s.prefix}-s3"},
    )
    aws.vpc.SecurityGroupEgressRule(
        "functions-to-s3-out",
        security_group_id=functions_sg.id,
        prefix_list_id=s3.prefix_list_id,
        ip_protocol="tcp",
        from_port=443,
        to_port=443,
        description="functions -> S3 (gateway endpoint)",
    )

    return Network(vpc, subnets, functions_sg, endpoints_sg)


def cell_groups(cell: Cell, net: Network) -> tuple[aws.ec2.SecurityGroup, aws.ec2.SecurityGroup]:
    """A cell's proxy and database groups (proxy, db): functions -> its proxy -> its cluster, and
    functions -> its cluster for LISTEN. One cell's groups never admit another's proxy."""
    of = "" if cell.first else f" (cell {cell.spec.name})"
    proxy_sg = _sg(cell.logical("proxy"), net.vpc, f"Postbox RDS Proxy: 5432 from the functions only{of}", cell.opts())
    # (and from the functions' LISTEN connections: changing a description would replace the group)
    db_sg = _sg(cell.logical("db"), net.vpc, f"Postbox Aurora cluster: 5432 from the proxy only{of}", cell.opts())
    _allow(cell.logical("functions-to-proxy"), into=proxy_sg, source=net.functions_sg, port=PG_PORT,
           what="functions -> RDS Proxy", opts=cell.opts())
    _allow(cell.logical("proxy-to-db"), into=db_sg, source=proxy_sg, port=PG_PORT, what="RDS Proxy -> Aurora",
           opts=cell.opts())
    _allow(cell.logical("functions-to-db"), into=db_sg, source=net.functions_sg, port=PG_PORT,
           what="long-poll LISTEN -> Aurora", opts=cell.opts())
    return proxy_sg, db_sg
