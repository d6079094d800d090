"""Secrets Manager rotation of the two secrets the stack owns, run by the `migrate` function (the
one function with the master user's credentials and DDL rights):

* the application's database secret (`{"username": "postbox_app", "password": ...}`): RDS Proxy
  logs in to the database with it; rotating sets a new password on the role, then makes it current
  (the proxy picks it up for its new database connections);
* the payload encryption key ring (`{"current": id, "keys": {id: key, ...}}`): rotating adds a
  fresh key and makes it current, keeping every old key, so old messages still open.

Each cell has its own application secret (POSTBOX_CELL_APP_SECRETS, by cell name; without cells,
POSTBOX_APP_SECRET_ARN is the one cell's): rotating it sets the password on that cell's role; the
key ring is one for every cell.

The four steps are Secrets Manager's (createSecret, setSecret, testSecret, finishSecret), each
safe to repeat. `bootstrap` gives both secrets their first value on the first deploy, so no secret
value ever passes through Pulumi.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

import psycopg

from postbox import cells, db, roles
from postbox.partitioned import payloads

APP_SECRET = "POSTBOX_APP_SECRET_ARN"
CELL_APP_SECRETS = "POSTBOX_CELL_APP_SECRETS"  # {"<cell>": "<its db-app secret's ARN>", ...}
KEYS_SECRET = "POSTBOX_ENCRYPTION_KEYS_SECRET_ARN"


def _client(client: Any = None) -> Any:
    if client is not None:
        return client
    import boto3

    return boto3.client("secretsmanager", region_name=os.environ.get("AWS_REGION"))


def app_secrets() -> dict[str, str]:
    """Each cell's application secret by cell name."""
    if os.environ.get(CELL_APP_SECRETS):
        return json.loads(os.environ[CELL_APP_SECRETS])
    return {cells.default().name: os.environ[APP_SECRET]} if os.environ.get(APP_SECRET) else {}


def _cell_of(arn: str) -> str:
    return next(name for name, secret in app_secrets().items() if secret == arn)


def _kind(arn: str) -> str:
    if arn in app_secrets().values():
        return "app"
    if arn == os.environ.get(KEYS_SECRET):
        return "keys"
    raise ValueError(f"not a secret this function rotates: {arn}")


def _new_value(kind: str, current: str | None) -> str:
    if kind == "keys":
        return json.dumps(payloads.rotated(current))
    # Generated here rather than by GetRandomPassword, which IAM cannot scope to a resource.
    return json.dumps({"username": roles.APP, "password": secrets.token_urlsafe(30)})


def _current(sm: Any, arn: str) -> str | None:
    try:
        return sm.get_secret_value(SecretId=arn, VersionStage="AWSCURRENT")["SecretString"]
    except sm.exceptions.ResourceNotFoundException:
        return None


def bootstrap(client: Any = None) -> dict[str, str]:
    """Give the current cell's application secret and the key ring a first value if they have none;
    (re)apply the app role's login on the current cell."""
    sm = _client(client)
    done = {}
    for env, arn in ((APP_SECRET, app_secrets().get(cells.current().name)), (KEYS_SECRET, os.environ.get(KEYS_SECRET))):
        if not arn:
            continue
        current = _current(sm, arn)
        if current is None:
            current = _new_value(_kind(arn), None)
            sm.put_secret_value(SecretId=arn, SecretString=current, VersionStages=["AWSCURRENT"])
            done[env] = "created"
        if _kind(arn) == "app":
            with psycopg.connect(db.conninfo(), autocommit=True) as conn:
                roles.set_password(conn, roles.APP, json.loads(current)["password"])
                roles.allow_iam_login(conn, roles.LISTEN, int(os.environ.get("POSTBOX_LISTEN_CONNECTION_LIMIT", "100")))
            done.setdefault(env, "applied")
    return done


def rotate(event: dict, client: Any = None, test_conninfo: str | None = None) -> None:
    """One step of a Secrets Manager rotation (`Step`, `SecretId`, `ClientRequestToken`)."""
    sm = _client(client)
    arn, token, step = event["SecretId"], event["ClientRequestToken"], event["Step"]
    kind = _kind(arn)
    if kind == "app":  # its cell's role
        with cells.use(_cell_of(arn)):
            return _step(sm, arn, token, step, kind, test_conninfo)
    return _step(sm, arn, token, step, kind, test_conninfo)


def _step(sm: Any, arn: str, token: str, step: str, kind: str, test_conninfo: str | None) -> None:
    stages = sm.describe_secret(SecretId=arn).get("VersionIdsToStages", {})
    if "AWSCURRENT" in stages.get(token, ()):
        return  # already done
    if step == "createSecret":
        try:
            sm.get_secret_value(SecretId=arn, VersionId=token, VersionStage="AWSPENDING")
        except sm.exceptions.ResourceNotFoundException:
            sm.put_secret_value(SecretId=arn, ClientRequestToken=token, VersionStages=["AWSPENDING"],
                                SecretString=_new_value(kind, _current(sm, arn)))
        return
    if token not in stages:
        raise ValueError(f"version {token} is not part of {arn}'s rotation")
    pending = sm.get_secret_value(SecretId=arn, VersionId=token, VersionStage="AWSPENDING")["SecretString"]
    if step == "setSecret":
        if kind == "app":
            with psycopg.connect(db.conninfo(), autocommit=True) as conn:
                roles.set_password(conn, roles.APP, json.loads(pending)["password"])
        return
    if step == "testSecret":
        if kind == "keys":
            payloads.parse_ring(pending)
        elif not roles.can_log_in(test_conninfo or _app_conninfo(json.loads(pending)["password"])):
            raise RuntimeError("the pending password does not log in")
        return
    if step == "finishSecret":
        current = next((v for v, st in stages.items() if "AWSCURRENT" in st), None)
        sm.update_secret_version_stage(SecretId=arn, VersionStage="AWSCURRENT", MoveToVersionId=token,
                                       RemoveFromVersionId=current)
        return
    raise ValueError(f"unknown rotation step {step!r}")


def _app_conninfo(password: str) -> str:
    """The cell's cluster itself (the proxy would still use the current password) as the app role:
    POSTBOX_CELLS names it as the cell's `listen_host`; without cells, POSTBOX_DB_CLUSTER_HOST."""
    info = psycopg.conninfo.conninfo_to_dict(db.conninfo())
    info.update(user=roles.APP, password=password)
    host = cells.current().listen_host or os.environ.get("POSTBOX_DB_CLUSTER_HOST")
    if host:
        info["host"] = host
    return psycopg.conninfo.make_conninfo(**info)
