"""Run the Pulumi program (infra/__main__.py, exactly as Pulumi does) under recording mocks.

`run_stack(stack, config)` returns every resource the program registered (type, name, resolved
inputs, mocked outputs) and the resolved stack exports. No AWS, no Pulumi CLI, no built zips.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ACCOUNT = "123456789012"
REGION = "us-east-1"
AZS = ["us-east-1a", "us-east-1b", "us-east-1c"]
SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:rds!cluster-0123-abcdef"
PROXY_ENDPOINT = "postbox.proxy-abc.us-east-1.rds.amazonaws.com"
PROXY_RESOURCE_ID = "prx-0123456789abcdef"
CLUSTER_RESOURCE_ID = "cluster-ABCDEFGHIJKL"
CLUSTER_ENDPOINT = "postbox.cluster-abc.us-east-1.rds.amazonaws.com"


@dataclass
class Recorded:
    typ: str
    name: str
    id: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    urn: str = ""  # what the engine would call it (its parents' types in it)
    region: str = REGION  # where it is: the stack's, or its provider's
    aliases: tuple[str, ...] = ()  # the URNs it was known by before (Pulumi `aliases`)
    custom: bool = True  # False: a component (nothing in the cloud)

    def policy(self) -> dict:
        """The parsed IAM policy document of a Role / RolePolicy input."""
        raw = self.inputs.get("policy") or self.inputs.get("assumeRolePolicy")
        return json.loads(raw) if isinstance(raw, str) else raw


def _outputs(typ: str, name: str, inputs: dict[str, Any], region: str = REGION) -> dict[str, Any]:
    """Plausible provider outputs for the types the program reads attributes of, in `region` (the
    stack's, or that of the provider the resource was made with)."""
    physical = inputs.get("name") or name
    arn = f"arn:aws:{typ.split(':')[1].split('/')[0]}:{region}:{ACCOUNT}:{name}"
    out: dict[str, Any] = {"id": f"{name}-id", "arn": arn}
    if typ == "aws:ec2/securityGroup:SecurityGroup":
        out["id"] = f"sg-{name}"
    elif typ == "aws:ec2/subnet:Subnet":
        out["id"] = f"subnet-{name}"
    elif typ == "aws:ec2/vpc:Vpc":
        out.update(id="vpc-postbox", mainRouteTableId="rtb-main") if name == "vpc" else out.update(
            id=f"vpc-{name}", mainRouteTableId=f"rtb-{name}")
    elif typ == "aws:ec2/vpcEndpoint:VpcEndpoint":
        out["prefixListId"] = "pl-s3" if inputs.get("vpcEndpointType") == "Gateway" else None
        service = inputs["serviceName"].split(".")[-1]
        out["dnsEntries"] = [{"dnsName": f"vpce-{name}.{service}.{region}.vpce.amazonaws.com", "hostedZoneId": "Z7H"}]
    elif typ == "aws:ec2/vpcPeeringConnection:VpcPeeringConnection":
        out["id"] = f"pcx-{name}"
    elif typ == "aws:s3/bucket:Bucket":
        physical = inputs.get("bucketPrefix", "") + "abc123"
        out.update(id=physical, bucket=physical, arn=f"arn:aws:s3:::{physical}")
    elif typ == "aws:rds/cluster:Cluster":
        # The first (or only) cell's "db" has the constants above; another cell's are its own.
        cell = "" if name == "db" else name.removesuffix("-db")
        out.update(
            id=inputs.get("clusterIdentifier", name),
            clusterIdentifier=inputs.get("clusterIdentifier", name),
            arn=f"arn:aws:rds:{region}:{ACCOUNT}:cluster:{inputs.get('clusterIdentifier', name)}",
            clusterResourceId=f"{CLUSTER_RESOURCE_ID}{cell.upper()}",
            endpoint=CLUSTER_ENDPOINT.replace("postbox.", f"postbox{cell}.", 1),
            masterUserSecrets=[{"secretArn": SECRET_ARN.replace(REGION, region) + cell,
                                "kmsKeyId": "aws/secretsmanager",
                                "secretStatus": "active"}],
        )
    elif typ == "aws:rds/proxy:Proxy":
        cell = "" if name == "db" else name.removesuffix("-db")
        out.update(endpoint=PROXY_ENDPOINT.replace("postbox.", f"postbox{cell}.", 1),
                   arn=f"arn:aws:rds:{region}:{ACCOUNT}:db-proxy:{PROXY_RESOURCE_ID}{cell}")
    elif typ == "aws:sqs/queue:Queue":
        out.update(url=f"https://sqs.{region}.amazonaws.com/{ACCOUNT}/{physical}",
                   arn=f"arn:aws:sqs:{region}:{ACCOUNT}:{physical}")
    elif typ == "aws:secretsmanager/secret:Secret":
        out.update(arn=f"arn:aws:secretsmanager:{region}:{ACCOUNT}:secret:{physical}-AbCdEf")
    elif typ == "aws:sns/topic:Topic":
        out.update(arn=f"arn:aws:sns:{region}:{ACCOUNT}:{physical}")
    elif typ == "aws:rds/proxyDefaultTargetGroup:ProxyDefaultTargetGroup":
        out.update(name="default")
    elif typ == "aws:lambda/function:Function":
        fn_arn = f"arn:aws:lambda:{region}:{ACCOUNT}:function:{physical}"
        out.update(
            arn=fn_arn,
            invokeArn=f"arn:aws:apigateway:{region}:lambda:path/2015-03-31/functions/{fn_arn}/invocations",
            version="1" if inputs.get("publish") else "$LATEST",
        )
    elif typ == "aws:lambda/alias:Alias":
        alias_arn = f"arn:aws:lambda:{region}:{ACCOUNT}:function:{inputs['functionName']}:{inputs['name']}"
        out.update(
            arn=alias_arn,
            invokeArn=f"arn:aws:apigateway:{region}:lambda:path/2015-03-31/functions/{alias_arn}/invocations",
        )
    elif typ == "aws:apigateway/restApi:RestApi":
        out.update(id="rest123", rootResourceId="root123",
                   executionArn=f"arn:aws:execute-api:{region}:{ACCOUNT}:rest123")
    elif typ == "aws:apigateway/stage:Stage":
        out.update(invokeUrl=f"https://rest123.execute-api.{region}.amazonaws.com/{inputs['stageName']}")
    elif typ == "aws:lambda/layerVersion:LayerVersion":
        out.update(arn=f"arn:aws:lambda:{region}:{ACCOUNT}:layer:{inputs['layerName']}:1")
    elif typ == "aws:cloudwatch/logGroup:LogGroup":
        out.update(arn=f"arn:aws:logs:{region}:{ACCOUNT}:log-group:{physical}")
    elif typ == "aws:iam/role:Role":
        out.update(arn=f"arn:aws:iam::{ACCOUNT}:role/{name}", name=name)
    elif typ == "aws:apigatewayv2/api:Api":
        out.update(
            id="api123",
            executionArn=f"arn:aws:execute-api:{region}:{ACCOUNT}:api123",
            apiEndpoint=f"https://api123.execute-api.{region}.amazonaws.com",
        )
    elif typ == "aws:apigatewayv2/integration:Integration":
        out["id"] = f"integ-{name}"
    elif typ == "aws:lambda/functionUrl:FunctionUrl":
        out.update(functionUrl=f"https://{name}-0123456789abcdef.lambda-url.{region}.on.aws/", urlId=f"{name}-id")
    elif typ == "aws:apigatewayv2/stage:Stage":
        out.update(invokeUrl=f"https://api123.execute-api.{region}.amazonaws.com/")
    return out


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[Recorded] = []
        self._registering = threading.local()  # the resource this thread's registration recorded
        self._regions: dict[str, str] = {}  # each explicit provider's region, by its id

    def _region(self, provider: str | None) -> str:
        """The region of the provider a resource or invoke names (`<urn>::<id>`), else the stack's."""
        return self._regions.get((provider or "").rsplit("::", 1)[-1], REGION)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        region = self._region(args.provider)
        outputs = _outputs(args.typ, args.name, args.inputs, region)
        rid = outputs.pop("id")
        if args.typ == "pulumi:providers:aws":
            self._regions[rid] = args.inputs.get("region", REGION)
        self._registering.found = Recorded(args.typ, args.name, rid, dict(args.inputs), outputs, region=region,
                                           custom=args.custom)
        self.resources.append(self._registering.found)
        return rid, {**args.inputs, **outputs}

    def watch(self, monitor: Any) -> None:
        """Give each recorded resource its URN and its aliases' URNs, which the mocks' own
        `new_resource` is not told."""
        register = monitor.RegisterResource

        def registered(request):
            response = register(request)
            if request.type != "pulumi:pulumi:Stack":
                found = self._registering.found
                found.urn = _engine_urn(response.urn)
                found.aliases = tuple(_engine_urn(_alias_urn(monitor, a, request)) for a in request.aliases)
            return response

        monitor.RegisterResource = registered

    def call(self, args: pulumi.runtime.MockCallArgs):
        token = args.token
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            region = self._region(args.provider)
            return {"names": [region + az[-1] for az in AZS], "zoneIds": ["use1-az1", "use1-az2", "use1-az4"],
                    "id": region}
        if token == "aws:index/getRegion:getRegion":
            return {"name": REGION, "region": REGION, "id": REGION, "endpoint": f"ec2.{REGION}.amazonaws.com"}
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT, "arn": f"arn:aws:iam::{ACCOUNT}:user/test", "userId": "AID", "id": ACCOUNT}
        if token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        raise NotImplementedError(f"unmocked invoke {token}")


def _engine_urn(urn: str) -> str:
    """As the engine spells it: the mocks put the root stack's type in front of its children's."""
    return urn.replace("::pulumi:pulumi:Stack$", "::", 1)


def _alias_urn(monitor: Any, alias: Any, request: Any) -> str:
    """The URN an alias names (a full URN, or a spec: another name, type or parent)."""
    if alias.WhichOneof("alias") == "urn":
        return alias.urn
    spec = alias.spec
    parent = "" if spec.noParent else (spec.parentUrn or request.parent)
    return monitor.make_urn(parent, spec.type or request.type, spec.name or request.name)


@dataclass
class StackRun:
    stack: str
    resources: list[Recorded]
    exports: dict[str, Any] = field(default_factory=dict)

    def of_type(self, typ: str) -> list[Recorded]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str, name: str) -> Recorded:
        found = [r for r in self.of_type(typ) if r.name == name]
        assert len(found) == 1, f"expected one {typ} named {name}, found {len(found)}"
        return found[0]


def run_stack(stack: str = "prod", config: dict[str, Any] | None = None, program: str | None = None) -> StackRun:
    """Run the program under mocks for `stack` with `postbox:` config; wait for everything.

    `program` is what Pulumi hands to runpy: infra/__main__.py by default, or a directory.
    """
    # Pulumi's mocks register resources on the thread's current event loop; a test elsewhere that
    # ran `asyncio.run` leaves the main thread with none, so each run brings its own.
    asyncio.set_event_loop(asyncio.new_event_loop())
    mocks = RecordingMocks()
    pulumi.runtime.settings.ROOT.set(None)  # a fresh root Stack resource per run
    # `postbox:` keys by their short name; others (`aws:region`) in full. A list or mapping (`cells`)
    # as JSON, as `pulumi config set --path` would store it.
    pulumi.runtime.set_all_config({(k if ":" in k else f"postbox:{k}"): v if isinstance(v, str) else
                                   json.dumps(v) if isinstance(v, list | dict) else str(v)
                                   for k, v in (config or {}).items()}, [])
    pulumi.runtime.set_mocks(mocks, project="postbox", stack=stack, preview=False)
    mocks.watch(pulumi.runtime.settings.get_monitor())
    run = StackRun(stack, mocks.resources)
    exported: dict[str, Any] = {}

    @pulumi.runtime.test
    def _run():
        with mock.patch.object(pulumi, "export", side_effect=exported.__setitem__):
            runpy.run_path(program or str(REPO / "infra" / "__main__.py"), run_name="__main__")
        return pulumi.Output.all(**exported).apply(run.exports.update)

    _run()
    return run
