"""The GDPR export bucket under Pulumi mocks: private, encrypted, TLS only, exports expiring; only
the work-gdpr agent may put exports and only the surface serving the export routes may read them
(to presign); S3 is reached through a gateway endpoint."""

from __future__ import annotations

import json

import pytest
from stack_harness import REGION, StackRun, run_stack
from test_stack import as_list, lambda_role_policies, statements

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")

BUCKET = "aws:s3/bucket:Bucket"
BUCKET_ARN = "arn:aws:s3:::postbox-prod-exports-abc123"


def _for_bucket(run: StackRun, typ: str):
    (found,) = [r for r in run.of_type(typ) if r.inputs["bucket"] == "postbox-prod-exports-abc123"]
    return found


def test_export_bucket_is_private_encrypted_and_expires_exports(prod: StackRun):
    (bucket,) = prod.of_type(BUCKET)
    assert bucket.inputs["bucketPrefix"] == "postbox-prod-exports-"
    assert not bucket.inputs.get("forceDestroy") and not bucket.inputs.get("acl")
    block = _for_bucket(prod, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(block[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                          "restrictPublicBuckets"))
    owner = _for_bucket(prod, "aws:s3/bucketOwnershipControls:BucketOwnershipControls").inputs
    assert owner["rule"]["objectOwnership"] == "BucketOwnerEnforced"
    sse = _for_bucket(prod, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "AES256"
    (rule,) = _for_bucket(prod, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs["rules"]
    assert rule["status"] == "Enabled" and rule["filter"]["prefix"] == "exports/" and rule["expiration"]["days"] == 7
    policy = json.loads(_for_bucket(prod, "aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    (deny,) = policy["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert prod.exports["export_bucket"] == "postbox-prod-exports-abc123"


def test_only_the_gdpr_agent_writes_and_the_work_surface_reads_exports(prod: StackRun):
    s3 = {}
    for name, policy in lambda_role_policies(prod).items():
        for st in statements(policy):
            if any(a.startswith("s3:") for a in as_list(st["Action"])):
                s3[name] = (as_list(st["Action"]), as_list(st["Resource"]))
    assert s3 == {
        "work-gdpr": (["s3:PutObject"], [f"{BUCKET_ARN}/exports/*"]),
        "work": (["s3:GetObject"], [f"{BUCKET_ARN}/exports/*"]),
    }


def test_s3_through_a_gateway_endpoint(prod: StackRun):
    endpoints = prod.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    (gateway,) = [e for e in endpoints if e.inputs["vpcEndpointType"] == "Gateway"]
    assert gateway.inputs["serviceName"] == f"com.amazonaws.{REGION}.s3"
    assert gateway.inputs["routeTableIds"] == ["rtb-main"]


def test_export_settings_come_from_config():
    run = run_stack("dev", {"exportRetentionDays": 3, "exportUrlSeconds": 300})
    (bucket,) = run.of_type(BUCKET)
    assert bucket.inputs["forceDestroy"] is True  # dev stacks come and go
    (rule,) = run.of_type("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")[0].inputs["rules"]
    assert rule["expiration"]["days"] == 3
    env = [f.inputs["environment"]["variables"] for f in run.of_type("aws:lambda/function:Function")
           if f.inputs["environment"]["variables"]["POWERTOOLS_SERVICE_NAME"] == "work-gdpr"][0]
    assert env["POSTBOX_EXPORT_URL_SECONDS"] == "300" and env["POSTBOX_EXPORT_RETENTION_DAYS"] == "3"
    with pytest.raises(Exception, match="exportRetentionDays"):
        run_stack("dev", {"exportRetentionDays": 0})
