"""The bucket of the work surface's GDPR exports: private, encrypted, TLS only, each export expiring.

The work-gdpr agent puts each finished export under `exports/`; a job's status answers a
presigned GET URL made by the surface serving the GDPR routes (signed with its role, which may
read `exports/*`). Nothing else reads or writes the bucket: no ACLs, all public access blocked,
and a lifecycle rule deletes exports `exportRetentionDays` after they were written.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.settings import Settings

PREFIX = "exports/"  # where postbox.work.gdpr_files puts exports (and all the roles may touch)


def build(s: Settings) -> aws.s3.Bucket:
    bucket = aws.s3.Bucket(
        "exports",
        bucket_prefix=f"{s.prefix}-exports-",
        force_destroy=s.stack == "dev",  # elsewhere a stack with exports left cannot drop them by accident
    )
    aws.s3.BucketOwnershipControls(
        "exports-ownership",
        bucket=bucket.id,
        rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),  # no ACLs at all
    )
    block = aws.s3.BucketPublicAccessBlock(
        "exports-public-access",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        "exports-encryption",
        bucket=bucket.id,
        rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
            apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(  # noqa: E501
                sse_algorithm="AES256"),
        )],
    )
    aws.s3.BucketLifecycleConfiguration(
        "exports-expiry",
        bucket=bucket.id,
        rules=[aws.s3.BucketLifecycleConfigurationRuleArgs(
            id="expire-exports",
            status="Enabled",
            filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=PREFIX),
            expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(days=s.export_retention_days),
            abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                days_after_initiation=1),
        )],
    )
    aws.s3.BucketPolicy(
        "exports-tls-only",
        bucket=bucket.id,
        policy=pulumi.Output.json_dumps({
            "Version": "2012-10-17",
            "Statement": [{
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket.arn, pulumi.Output.concat(bucket.arn, "/*")],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }],
        }),
        opts=pulumi.ResourceOptions(depends_on=[block]),
    )
    return bucket
