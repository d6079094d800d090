"""Connection settings: DATABASE_URL locally, the proxy endpoint plus the DB secret on AWS."""

from __future__ import annotations

import json

import boto3
import psycopg
import pytest
from moto import mock_aws

from postbox import config, db


@pytest.fixture
def aws_env(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("POSTBOX_DB_HOST", "proxy.example.internal")
    config.reset()
    yield monkeypatch
    config.reset()


def test_conninfo_reads_the_db_secret(aws_env):
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        arn = sm.create_secret(Name="db", SecretString=json.dumps({"username": "pb", "password": "s3cret"}))["ARN"]
        aws_env.setenv("POSTBOX_DB_SECRET_ARN", arn)
        config.reset()
        info = psycopg.conninfo.conninfo_to_dict(db.conninfo())
    assert info["host"] == "proxy.example.internal" and info["user"] == "pb" and info["password"] == "s3cret"
    assert info["sslmode"] == "require" and info["dbname"] == "postbox"


def test_a_rotated_password_reaches_new_connections(aws_env):
    aws_env.setattr(db, "SECRET_TTL_S", 0.0)
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        arn = sm.create_secret(Name="db2", SecretString=json.dumps({"username": "pb", "password": "old"}))["ARN"]
        aws_env.setenv("POSTBOX_DB_SECRET_ARN", arn)
        config.reset()
        assert psycopg.conninfo.conninfo_to_dict(db.conninfo())["password"] == "old"
        sm.put_secret_value(SecretId=arn, SecretString=json.dumps({"username": "pb", "password": "new"}))
        assert psycopg.conninfo.conninfo_to_dict(db.conninfo())["password"] == "new"


def test_conninfo_without_any_setting_says_what_is_missing(aws_env):
    aws_env.delenv("POSTBOX_DB_HOST")
    config.reset()
    with pytest.raises(RuntimeError, match="DATABASE_URL"):
        db.conninfo()
