"""The reference for a surface function's cold import: the least a Powertools HTTP handler on this
stack imports (the resolver with validation, pydantic, psycopg, zstandard) and one route."""

import psycopg  # noqa: F401
import zstandard  # noqa: F401
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from pydantic import BaseModel

app = APIGatewayHttpResolver(enable_validation=True)


class Send(BaseModel):
    message: dict


@app.post("/send")
def send(body: Send) -> dict:
    return {"ok": True}


def handler(event: dict, context: object) -> dict:
    return app.resolve(event, context)
