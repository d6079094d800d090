"""Aurora PostgreSQL Serverless v2 behind RDS Proxy.

The master password is generated, stored and rotated by RDS itself (`manage_master_user_password`):
no password ever passes through Pulumi config or state, and every run is deterministic. Only the
migrate function logs in as the master user (through the proxy, with that secret). Every other
function logs in as `postbox_app` (DML and EXECUTE only): it presents an IAM token to the proxy
(`rds-db:connect`, no password in the function), and the proxy logs in to the database with the
rotated `db-app` secret. The proxy pools connections across thousands of short Lambda invocations
and requires TLS.

One exception to "only through the proxy": a long poll LISTENs, which would pin a proxy session, so
the surface functions open one connection straight to the cluster for it, as `postbox_listen` (may
only register waiters), with IAM authentication and a connection limit on that role.

Each cell (its component) has one of these, its resources the cell's children: the first cell's
under today's names, so a stack without `cells:` keeps the database it has. A cell in another
region has them there (its provider), in its own VPC; the functions reach them over the peering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.network import PG_PORT
from infra.placement import Cell
from infra.settings import Settings

DB_NAME = "postbox"
MASTER_USER = "postbox"
APP_USER = "postbox_app"  # created by the schema baseline; its login comes from the db-app secret
LISTEN_USER = "postbox_listen"


@dataclass
class Database:
    cluster: aws.rds.Cluster
    instances: list[aws.rds.ClusterInstance]
    proxy: aws.rds.Proxy
    proxy_target: aws.rds.ProxyTarget
    secret_arn: pulumi.Output[str]  # the master user's (migrate function only)
    app_secret_arn: pulumi.Output[str]

    @property
    def endpoint(self) -> pulumi.Output[str]:
        return self.proxy.endpoint

    @property
    def ready(self) -> list[pulumi.Resource]:
        """What must exist before anything connects (the migration run waits on these)."""
        return [self.proxy_target, *self.instances]

    @property
    def cluster_endpoint(self) -> pulumi.Output[str]:
        return self.cluster.endpoint

    def proxy_user_arn(self, user: str) -> pulumi.Output[str]:
        """What `rds-db:connect` names to let a role log in to the proxy as `user` with a token."""
        return pulumi.Output.all(self.proxy.arn, self.cluster.arn).apply(
            lambda a: _rds_db_arn(a[1], a[0].rsplit(":", 1)[-1], user)
        )

    def cluster_user_arn(self, user: str) -> pulumi.Output[str]:
        return pulumi.Output.all(self.cluster.cluster_resource_id, self.cluster.arn).apply(
            lambda a: _rds_db_arn(a[1], a[0], user)
        )


def _rds_db_arn(any_rds_arn: str, resource_id: str, user: str) -> str:
    partition, region, account = any_rds_arn.split(":")[1], any_rds_arn.split(":")[3], any_rds_arn.split(":")[4]
    return f"arn:{partition}:rds-db:{region}:{account}:dbuser:{resource_id}/{user}"


def build(s: Settings, cell: Cell, subnet_ids: list[pulumi.Output[str]], app_secret_arn: pulumi.Output[str],
          db_sg: aws.ec2.SecurityGroup, proxy_sg: aws.ec2.SecurityGroup) -> Database:
    """The cell's cluster, instances and proxy, in the cell's region: logical names from
    `cell.logical`, physical ones from `cell.physical` (the stack's prefix for the first cell,
    `<prefix>-<cell>` for the others). `app_secret_arn`: the db-app secret as the proxy reads it."""
    subnet_group = aws.rds.SubnetGroup(cell.logical("db"), subnet_ids=subnet_ids,
                                       description="Postbox private subnets", opts=cell.in_region())
    cluster = aws.rds.Cluster(
        cell.logical("db"),
        cluster_identifier=cell.physical,
        engine="aurora-postgresql",
        engine_mode="provisioned",  # Serverless v2 is "provisioned" with db.serverless instances
        engine_version=s.db_engine_version,
        database_name=DB_NAME,
        master_username=MASTER_USER,
        manage_master_user_password=True,
        iam_database_authentication_enabled=True,  # postbox_listen logs in with IAM tokens
        storage_encrypted=True,
        db_subnet_group_name=subnet_group.name,
        vpc_security_group_ids=[db_sg.id],
        port=PG_PORT,
        serverlessv2_scaling_configuration=aws.rds.ClusterServerlessv2ScalingConfigurationArgs(
            min_capacity=cell.spec.min_acu,
            max_capacity=cell.spec.max_acu,
        ),
        backup_retention_period=s.db_backup_retention_days,
        copy_tags_to_snapshot=True,
        deletion_protection=s.deletion_protection,
        skip_final_snapshot=s.skip_final_snapshot,
        final_snapshot_identifier=None if s.skip_final_snapshot else f"{cell.physical}-final",
        enabled_cloudwatch_logs_exports=["postgresql"],
        # Version upgrades are a deliberate config change, applied in the maintenance window.
        allow_major_version_upgrade=False,
        apply_immediately=False,
        opts=cell.in_region(),
    )
    instances = [
        aws.rds.ClusterInstance(
            cell.logical(f"db-{i}"),
            identifier=f"{cell.physical}-{i}",
            cluster_identifier=cluster.id,
            instance_class="db.serverless",
            engine=cluster.engine,
            engine_version=cluster.engine_version,
            db_subnet_group_name=subnet_group.name,
            publicly_accessible=False,
            auto_minor_version_upgrade=True,
            opts=cell.in_region(),
        )
        for i in range(s.db_instances)
    ]
    secret_arn = cluster.master_user_secrets.apply(lambda secrets: secrets[0].secret_arn)

    proxy_role = aws.iam.Role(
        cell.logical("proxy"),
        description="RDS Proxy: read the Postbox DB secret",
        assume_role_policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "rds.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
        opts=cell.in_region(),
    )
    # Both secrets are encrypted with the AWS-managed `aws/secretsmanager` key, whose key
    # policy already lets Secrets Manager decrypt for callers in the account: no kms grant needed.
    proxy_policy = aws.iam.RolePolicy(
        cell.logical("proxy"),
        role=proxy_role.id,
        policy=pulumi.Output.json_dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "DbSecret",
                        "Effect": "Allow",
                        "Action": ["secretsmanager:GetSecretValue"],
                        "Resource": [secret_arn, app_secret_arn],
                    }
                ],
            }
        ),
        opts=cell.in_region(),
    )
    proxy = aws.rds.Proxy(
        cell.logical("db"),
        name=cell.physical,
        engine_family="POSTGRESQL",
        require_tls=True,
        role_arn=proxy_role.arn,
        vpc_subnet_ids=subnet_ids,
        vpc_security_group_ids=[proxy_sg.id],
        idle_client_timeout=1800,
        auths=[
            aws.rds.ProxyAuthArgs(
                auth_scheme="SECRETS",
                secret_arn=secret_arn,
                iam_auth="DISABLED",
                client_password_auth_type="POSTGRES_SCRAM_SHA_256",
                description="Postbox master user (RDS-managed secret): the migrate function only",
            ),
            aws.rds.ProxyAuthArgs(
                auth_scheme="SECRETS",
                secret_arn=app_secret_arn,
                iam_auth="REQUIRED",  # clients present IAM tokens; the proxy logs in with the secret
                client_password_auth_type="POSTGRES_SCRAM_SHA_256",
                description="postbox_app: every other function",
            ),
        ],
        opts=cell.in_region(depends_on=[proxy_policy]),
    )
    target_group = aws.rds.ProxyDefaultTargetGroup(
        cell.logical("db"),
        db_proxy_name=proxy.name,
        connection_pool_config=aws.rds.ProxyDefaultTargetGroupConnectionPoolConfigArgs(
            max_connections_percent=90,
            max_idle_connections_percent=10,
            connection_borrow_timeout=10,
        ),
        opts=cell.in_region(),
    )
    target = aws.rds.ProxyTarget(
        cell.logical("db"),
        db_proxy_name=proxy.name,
        target_group_name=target_group.name,
        db_cluster_identifier=cluster.cluster_identifier,
        opts=cell.in_region(depends_on=instances),
    )
    return Database(cluster, instances, proxy, target, secret_arn, app_secret_arn)
