"""The VPC: private subnets only, reached from outside through API Gateway alone.

No internet gateway and no NAT: the functions talk to RDS Proxy inside the VPC and to the two AWS
APIs they call (Secrets Manager for the DB credentials and keys, Lambda for consumer dispatch, STS
for the dispatcher's per-tenant sessions)
through interface endpoints, and to S3 (GDPR exports) through a gateway endpoint. Security groups
chain functions -> proxy -> database on 5432, plus functions -> database on 5432 for the long polls'
LISTEN connections (the proxy would pin them), functions -> S3's prefix list on 443, and nothing else.
Each cell has its own proxy and database groups (`cell_groups`), the first cell's under today's names.

A cell in another region gets a VPC of the same shape there (`private_vpc` with its provider),
peered with this one (`peer`): a route each way, its proxy and cluster admitting the functions'
subnets by CIDR (groups cannot name groups across regions), and a Secrets Manager endpoint of its
region that the migrate function reaches over the peering.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
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
    subnet_cidrs: tuple[str, ...] = ()  # the functions' subnets: what a cell in another region admits

    @property
    def subnet_ids(self) -> list[pulumi.Output[str]]:
        return [s.id for s in self.subnets]


@dataclass
class Peered:
    """A cell's own VPC in another region, peered with the stack's: its cluster and proxy live in it,
    and so does the Secrets Manager endpoint the migrate function reaches that region's secrets by."""

    vpc: aws.ec2.Vpc
    subnets: list[aws.ec2.Subnet]
    peering: aws.ec2.VpcPeeringConnection
    secrets_endpoint: aws.ec2.VpcEndpoint
    ready: list[pulumi.Resource]  # the way there (accepted peering, routes, rules): the migration run waits on it

    @property
    def subnet_ids(self) -> list[pulumi.Output[str]]:
        return [s.id for s in self.subnets]

    @property
    def secrets_url(self) -> pulumi.Output[str]:
        """The endpoint's own DNS name (public, resolving to its private addresses: reachable over the
        peering, where the region's usual name would leave the VPC)."""
        return self.secrets_endpoint.dns_entries.apply(lambda entries: f"https://{entries[0].dns_name}")


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


def subnet_blocks(cidr: str, az_count: int) -> list[str]:
    """The private subnets' CIDRs: the first /20s of the VPC's, one per AZ."""
    return [str(b) for b in list(ipaddress.ip_network(cidr).subnets(new_prefix=20))[:az_count]]


def private_vpc(cidr: str, az_count: int, tag: str, *, logical: Callable[[str], str] = str,
                opts: pulumi.ResourceOptions | None = None) -> tuple[aws.ec2.Vpc, list[aws.ec2.Subnet]]:
    """A VPC of private subnets only, one per AZ of the region `opts` name (its provider's, else the
    stack's): the stack's under its own names, a cell's in another region under `logical` ones."""
    vpc = aws.ec2.Vpc(
        logical("vpc"),
        cidr_block=cidr,
        enable_dns_support=True,
        enable_dns_hostnames=True,  # needed for the endpoints' private DNS names
        tags={"Name": tag},
        opts=opts,
    )
    provider = opts.provider if opts else None
    azs = aws.get_availability_zones_output(state="available", opts=pulumi.InvokeOutputOptions(provider=provider))
    subnets = [
        aws.ec2.Subnet(
            logical(f"private-{i}"),
            vpc_id=vpc.id,
            cidr_block=block,
            availability_zone=azs.names.apply(lambda names, i=i: names[i]),
            map_public_ip_on_launch=False,
            tags={"Name": f"{tag}-private-{i}"},
            opts=opts,
        )
        for i, block in enumerate(subnet_blocks(cidr, az_count))
    ]
    return vpc, subnets


def build(s: Settings) -> Network:
    vpc, subnets = private_vpc(s.vpc_cidr, s.az_count, s.prefix)

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

    return Network(vpc, subnets, functions_sg, endpoints_sg, tuple(subnet_blocks(s.vpc_cidr, s.az_count)))


def _admit(name: str, *, into: aws.ec2.SecurityGroup, cidrs: tuple[str, ...], port: int, what: str,
           opts: pulumi.ResourceOptions) -> list[aws.vpc.SecurityGroupIngressRule]:
    """TCP `port` on `into` from each of `cidrs`: across a peering between regions, a group cannot
    name the other side's groups, only its addresses."""
    return [aws.vpc.SecurityGroupIngressRule(f"{name}-in-{i}", security_group_id=into.id, cidr_ipv4=cidr,
                                             ip_protocol="tcp", from_port=port, to_port=port, description=what,
                                             opts=opts)
            for i, cidr in enumerate(cidrs)]


def peer(s: Settings, cell: Cell, net: Network) -> Peered:
    """The cell's VPC in its region (the stack's shape: private subnets only), peered with the
    stack's (requested from the stack's region, accepted in the cell's), a route each way, and the
    functions' way out to it: PostgreSQL to its proxy and cluster, HTTPS to its Secrets Manager."""
    cidr = cell.spec.vpc_cidr
    vpc, subnets = private_vpc(cidr, s.az_count, cell.physical, logical=cell.logical, opts=cell.in_region())
    peering = aws.ec2.VpcPeeringConnection(
        cell.logical("peering"), vpc_id=net.vpc.id, peer_vpc_id=vpc.id, peer_region=cell.spec.region,
        auto_accept=False,  # between regions the other side accepts
        tags={"Name": cell.physical}, opts=cell.opts())
    accepted = aws.ec2.VpcPeeringConnectionAccepter(
        cell.logical("peering-accepter"), vpc_peering_connection_id=peering.id, auto_accept=True,
        tags={"Name": cell.physical}, opts=cell.in_region())
    ready: list[pulumi.Resource] = [accepted]
    ready.append(aws.ec2.Route(cell.logical("route-to-cell"), route_table_id=net.vpc.main_route_table_id,
                               destination_cidr_block=cidr, vpc_peering_connection_id=peering.id,
                               opts=cell.opts(depends_on=[accepted])))
    ready.append(aws.ec2.Route(cell.logical("route-to-stack"), route_table_id=vpc.main_route_table_id,
                               destination_cidr_block=s.vpc_cidr, vpc_peering_connection_id=accepted.id,
                               opts=cell.in_region()))
    for port, what in ((PG_PORT, "functions -> the cell's proxy and cluster"),
                       (443, "migrate -> the cell's Secrets Manager endpoint")):
        ready.append(aws.vpc.SecurityGroupEgressRule(
            cell.logical(f"functions-to-cell-{port}-out"), security_group_id=net.functions_sg.id, cidr_ipv4=cidr,
            ip_protocol="tcp", from_port=port, to_port=port, description=f"{what} ({cell.spec.region})",
            opts=cell.opts()))
    endpoints_sg = _sg(cell.logical("endpoints"), vpc, "Interface endpoint: 443 from the stack's functions only",
                       cell.in_region())
    ready += _admit(cell.logical("functions-to-endpoints"), into=endpoints_sg, cidrs=net.subnet_cidrs, port=443,
                    what="functions -> Secrets Manager", opts=cell.in_region())
    # Only the migrate function reads this region's secrets (the master user's); private DNS stays
    # off: nothing in this VPC calls Secrets Manager, and the stack's VPC uses the endpoint's own name.
    secrets_endpoint = aws.ec2.VpcEndpoint(
        cell.logical("endpoint-secretsmanager"), vpc_id=vpc.id,
        service_name=f"com.amazonaws.{cell.spec.region}.secretsmanager", vpc_endpoint_type="Interface",
        private_dns_enabled=False, subnet_ids=[sn.id for sn in subnets], security_group_ids=[endpoints_sg.id],
        tags={"Name": f"{cell.physical}-secretsmanager"}, opts=cell.in_region())
    return Peered(vpc, subnets, peering, secrets_endpoint, [*ready, secrets_endpoint])


def cell_groups(cell: Cell, net: Network, there: Peered | None = None
                ) -> tuple[aws.ec2.SecurityGroup, aws.ec2.SecurityGroup]:
    """A cell's proxy and database groups (proxy, db): functions -> its proxy -> its cluster, and
    functions -> its cluster for LISTEN. One cell's groups never admit another's proxy. A cell in
    another region (`there`) has them in its own VPC, admitting the functions' subnets by CIDR."""
    of = "" if cell.first else f" (cell {cell.spec.name})"
    vpc = there.vpc if there else net.vpc
    proxy_sg = _sg(cell.logical("proxy"), vpc, f"Postbox RDS Proxy: 5432 from the functions only{of}",
                   cell.in_region())
    # (and from the functions' LISTEN connections: changing a description would replace the group)
    db_sg = _sg(cell.logical("db"), vpc, f"Postbox Aurora cluster: 5432 from the proxy only{of}", cell.in_region())
    if there is None:
        _allow(cell.logical("functions-to-proxy"), into=proxy_sg, source=net.functions_sg, port=PG_PORT,
               what="functions -> RDS Proxy", opts=cell.opts())
    else:
        there.ready += _admit(cell.logical("functions-to-proxy"), into=proxy_sg, cidrs=net.subnet_cidrs, port=PG_PORT,
                              what="functions -> RDS Proxy (peered)", opts=cell.in_region())
    _allow(cell.logical("proxy-to-db"), into=db_sg, source=proxy_sg, port=PG_PORT, what="RDS Proxy -> Aurora",
           opts=cell.in_region())
    if there is None:
        _allow(cell.logical("functions-to-db"), into=db_sg, source=net.functions_sg, port=PG_PORT,
               what="long-poll LISTEN -> Aurora", opts=cell.opts())
    else:  # LISTEN, and the migrate function testing a rotated password on the cluster
        there.ready += _admit(cell.logical("functions-to-db"), into=db_sg, cidrs=net.subnet_cidrs, port=PG_PORT,
                              what="functions -> Aurora (peered)", opts=cell.in_region())
    return proxy_sg, db_sg
