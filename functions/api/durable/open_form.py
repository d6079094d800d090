"""The open protocol's form, `/v1/stream/{name}`: a key's own streams (see `postbox.durable.access`)."""

from __future__ import annotations

from urllib.parse import unquote

from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from functions.api.durable import verbs
from functions.api.durable.resolver import headers, principal
from functions.api.durable.wire import stream_name_of
from postbox.durable import access

router = APIGatewayHttpRouter()  # routes carry no return annotation: validation would read it as a model
STREAM = "/v1/stream/<name>"


def _form(name: str, need: str) -> verbs.Form:
    allowed = access.open_form(principal(), need)
    form = verbs.Form(False, allowed, stream_name_of(unquote(name)))
    if need == access.READ:
        access.require_readable(allowed, form.name)
    return form


@router.get(STREAM)
def read(name: str):
    return verbs.read(_form(name, access.READ), headers())


@router.head(STREAM)
def head(name: str):
    return verbs.head(_form(name, access.READ))


@router.put(STREAM)
def create(name: str):
    return verbs.create(_form(name, access.WRITE), headers())


@router.post(STREAM)
def append(name: str):
    return verbs.append(_form(name, access.WRITE), headers())


@router.delete(STREAM)
def delete(name: str):
    return verbs.delete(_form(name, access.WRITE))


@router.route(STREAM, method="OPTIONS")
def preflight(name: str):
    return verbs.answer(204)
