"""The local gateway: a real HTTP server's ASGI app that behaves like API Gateway's HTTP API.

Each request is matched against the route table, turned into the payload 2.0 event API Gateway
would send, run past the REQUEST authorizer, handed to the surface's Lambda handler in process
(on a worker thread: handlers block on the database and on long polls) and turned back into HTTP.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from functions.local.events import HttpResponse, authorizer_event, http_event, read_response
from functions.local.invoke import invoke
from functions.routes import FUNCTIONS, match

AUTHORIZER = "functions.authorizer.handler"
_NOT_FOUND = HttpResponse(404, [("content-type", "application/json")], b'{"message":"Not Found"}')


class LocalGateway:
    def __init__(self, max_workers: int = 64, timeout_s: float = 30.0) -> None:
        self.executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="lambda")
        self.timeout_s = timeout_s

    def handle(
        self, method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes
    ) -> HttpResponse:
        """One request, synchronously: route, authorize, invoke, translate."""
        found = match(method, path)
        if found is None:
            return _NOT_FOUND
        route, params = found
        event = http_event(method, path, query=query, headers=headers, body=body, route=route,
                           path_parameters=params)
        answer = invoke(AUTHORIZER, authorizer_event(event), "authorizer", self.timeout_s)
        if not answer.get("isAuthorized"):
            return HttpResponse(403, [("content-type", "application/json")], b'{"message":"Forbidden"}')
        event["requestContext"]["authorizer"] = {"lambda": answer.get("context", {})}
        try:
            result = invoke(FUNCTIONS[route.function], event, route.function, self.timeout_s)
        except Exception:  # an unhandled error in a function is API Gateway's 500
            import traceback

            traceback.print_exc()
            body = json.dumps({"message": "Internal Server Error"}).encode()
            return HttpResponse(500, [("content-type", "application/json")], body)
        response = read_response(result)
        response.headers.append(("apigw-requestid", event["requestContext"]["requestId"]))  # as API Gateway does
        return response

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.executor.shutdown(wait=False, cancel_futures=True)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(
            self.executor,
            self.handle,
            scope["method"],
            scope["path"],
            scope.get("query_string", b"").decode("latin-1"),
            headers,
            b"".join(chunks),
        )
        await send({
            "type": "http.response.start",
            "status": response.status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers],
        })
        await send({"type": "http.response.body", "body": response.body})
