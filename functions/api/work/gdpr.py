"""Routes of the work surface's GDPR jobs: submit an erasure or an export for an actor, follow its
job, download a finished export (kept in the database; on AWS the status answers an S3 URL and
the download route redirects to it).

Parses and shapes only; jobs live in `postbox.work.gdpr`. A tenant id in the path other than the
caller's is answered as a missing tenant (404 NOT_FOUND).
"""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import field_validator

from functions.api.work.envelope import MOUNT, caller, data
from functions.api.work.fields import ActorId, ActorType, _Strict, not_reserved
from postbox.work import gdpr

router = Router()


class _Actor(_Strict):
    actor_type: ActorType
    actor_id: ActorId

    @field_validator("actor_type")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        return not_reserved(value)


class Erasure(_Actor):
    """Erase an actor's data: `redact` (default) overwrites it with a marker, `delete` removes it."""

    mode: Literal["redact", "delete"] = "redact"


class Export(_Actor):
    """Export an actor's data as JSON lines (default) or one JSON document, optionally zstd-compressed."""

    format: Literal["jsonl", "json"] = "jsonl"
    compression: Literal["none", "zstd"] = "none"


router = Router()
TENANT = "/tenants/<tenant_id>"
ACCEPTED = {202: {"description": "Accepted: the job is queued"}}


@router.post(TENANT + "/data-erasure", responses=ACCEPTED)
def submit_erasure(tenant_id: str, body: Annotated[Erasure, Body()]):
    return data(gdpr.submit(caller(), tenant_id, "erasure", body.fields()), 202)


@router.get(TENANT + "/data-erasure/jobs/<job_id>")
def erasure_job(tenant_id: str, job_id: str):
    return data(gdpr.status(caller(), tenant_id, "erasure", job_id))


@router.post(TENANT + "/data-export", responses=ACCEPTED)
def submit_export(tenant_id: str, body: Annotated[Export, Body()]):
    return data(gdpr.submit(caller(), tenant_id, "export", body.fields()), 202)


@router.get(TENANT + "/data-export/jobs/<job_id>")
def export_job(tenant_id: str, job_id: str):
    doc = gdpr.status(caller(), tenant_id, "export", job_id)
    if doc.get("download") and doc["download"]["url"] is None:  # kept in the database: our own route
        doc["download"]["url"] = f"{MOUNT}/tenants/{doc['tenant_id']}/data-export/jobs/{doc['job_id']}/download"
    return data(doc)


@router.get(TENANT + "/data-export/jobs/<job_id>/download",
            responses={200: {"description": "The export file"}, 302: {"description": "Redirect to the file on S3"}})
def download_export(tenant_id: str, job_id: str):
    found = gdpr.export_file(caller(), tenant_id, job_id)
    if found.url is not None:
        return Response(status_code=302, headers={"Location": found.url})
    return Response(status_code=200, content_type=found.content_type, body=found.content,
                    headers={"Content-Disposition": f'attachment; filename="{found.filename}"'})
