"""The role the consumer-dispatch agent invokes a queue's consumer function as: one tenant at a time.

The dispatcher's own role may not invoke any consumer. It may only assume this role, with the
session tag `postbox-tenant=<tenant id, 32 hex digits>` of the queue it is serving; this role may
invoke only `<prefix><tag's tenant>-*` (`consumerFunctionPattern` without its `*`), through the
policy variable `${aws:PrincipalTag/postbox-tenant}`. So a function name that does not begin with
the queue's tenant's prefix is refused by IAM too, whatever the API or the dispatcher let through.
The tenant part has a fixed length, so no tenant's prefix begins another's.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from infra.settings import Settings

TENANT_TAG = "postbox-tenant"  # postbox.queues.consumer_functions.TENANT_TAG


def role_name(s: Settings) -> str:
    return f"{s.prefix}-consumer-invoker"


def role_arn(s: Settings, partition: pulumi.Input[str], account: pulumi.Input[str]) -> pulumi.Output[str]:
    """Known before the role exists (its name is fixed), so the dispatcher's policy can name it."""
    return pulumi.Output.concat("arn:", partition, ":iam::", account, ":role/", role_name(s))


def trust(dispatcher_role_arn: pulumi.Input[str]) -> pulumi.Output[str]:
    """Only the dispatcher's role, and only with the tenant tag (and no other tag)."""
    return pulumi.Output.json_dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "DispatcherAsOneTenant",
            "Effect": "Allow",
            "Principal": {"AWS": dispatcher_role_arn},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {
                "StringLike": {f"aws:RequestTag/{TENANT_TAG}": "?*"},
                "ForAllValues:StringEquals": {"aws:TagKeys": [TENANT_TAG]},
            },
        }],
    })


def policy(s: Settings, partition: pulumi.Input[str], region: pulumi.Input[str],
           account: pulumi.Input[str]) -> pulumi.Output[str]:
    prefix = s.consumer_function_pattern.removesuffix("*")
    own_functions = pulumi.Output.concat(
        "arn:", partition, ":lambda:", region, ":", account, ":function:", prefix,
        "${aws:PrincipalTag/", TENANT_TAG, "}-*")
    return pulumi.Output.json_dumps({
        "Version": "2012-10-17",
        "Statement": [{"Sid": "InvokeTheTenantsConsumers", "Effect": "Allow", "Action": ["lambda:InvokeFunction"],
                       "Resource": own_functions}],
    })


def build(s: Settings, dispatcher_role: aws.iam.Role, partition: pulumi.Input[str], region: pulumi.Input[str],
          account: pulumi.Input[str]) -> aws.iam.Role:
    role = aws.iam.Role("consumer-invoker", name=role_name(s), assume_role_policy=trust(dispatcher_role.arn),
                        max_session_duration=3600, description="Postbox: invokes one tenant's consumer functions")
    aws.iam.RolePolicy("policy-consumer-invoker", role=role.id, policy=policy(s, partition, region, account))
    return role
