"""One process serves several requests of a function at once (the local gateway gives each connection
a thread; Lambda gives an environment one request at a time), so nothing a resolver keeps may be
shared between two requests: a route's middleware stack is built once, before or under a lock
(Powertools builds it on the route's first call, a frame at a time, so two first calls at once chained
onto each other's half-built stack: `MiddlewareFrame.__call__() got an unexpected keyword argument`,
and a 500 on every later call of that route in that process), and the event, the Lambda context and
the routing context are each request's own."""

from __future__ import annotations

import json
import threading
import time

import pytest
from aws_lambda_powertools.event_handler import api_gateway

from functions.api.common import SurfaceResolver
from functions.api.request_local import RequestLocalResolver
from functions.local.events import http_event
from functions.local.gateway import LocalGateway, resolver_of
from functions.local.invoke import entry_point
from functions.local.lambda_context import LocalContext
from functions.routes import FUNCTIONS
from support.events import api_event
from support.interleaved import run_interleaved, switching_often

THREADS = 12
RESOLVED = sorted(f for f, dotted in FUNCTIONS.items() if resolver_of(dotted) is not None)
"""The functions served through a resolver (SQS's reads its events itself and keeps nothing between them)."""


class SlowFrame(api_gateway.MiddlewareFrame):
    """A frame that takes 2 ms to make: a stack being built stays half-built long enough for every
    other thread's first call to see it (the race, certain rather than rare)."""

    def __init__(self, current_middleware, next_middleware) -> None:
        time.sleep(0.002)
        super().__init__(current_middleware, next_middleware)


@pytest.fixture
def racy(monkeypatch):
    """Frames slow to make, and the interpreter switching threads as often as it can."""
    monkeypatch.setattr(api_gateway, "MiddlewareFrame", SlowFrame)
    with switching_often():
        yield


def _unbuilt(resolver) -> list:
    """Every route of `resolver` as it is before its first call (a fresh worker's), and what to put
    back afterwards."""
    saved = []
    for route in resolver._static_routes + resolver._dynamic_routes:
        saved.append((route, route._middleware_stack, route._middleware_stack_built))
        route._middleware_stack, route._middleware_stack_built = route.func, False
    return saved


def _restore(saved: list) -> None:
    for route, stack, built in saved:
        route._middleware_stack, route._middleware_stack_built = stack, built


def _frames(route) -> list[str]:
    names, frame = [], route._middleware_stack
    while isinstance(frame, api_gateway.MiddlewareFrame):
        names.append(frame.current_middleware.__name__)
        frame = frame.next_middleware
    assert frame is route.func
    return names


def _requests(key: str, suffix: str) -> dict[str, tuple[str, str, dict | None]]:
    """One request per surface function that goes through its route's whole stack to the handler."""
    return {
        "console": ("GET", "/console/index.html", None),
        "queues": ("GET", f"/api/v1/queues/missing_{suffix}", None),
        "keyed-streams": ("GET", "/v1/streams", None),
        "durable": ("GET", f"/v1/stream/missing-{suffix}", None),
        "partitioned": ("GET", f"/api/v1/resources/queues/missing_{suffix}", None),
        "flows": ("POST", "/streams/v1/state/get", {"query_id": f"missing-{suffix}", "partition_id": "p"}),
        "work": ("GET", "/v1/modules/scaiqueue/whoami", None),
    }


def _call(function: str, key: str, method: str, path: str, body: dict | None) -> tuple[int, object]:
    result = entry_point(FUNCTIONS[function])(api_event(method, path, key=key, body=body), LocalContext(function))
    text = result.get("body") or ""
    try:
        answer = json.loads(text)
    except ValueError:
        answer = text
    if isinstance(answer, dict):
        answer.pop("meta", None)  # the work surface's request id
    return result["statusCode"], answer


@pytest.mark.parametrize("function", RESOLVED)
def test_first_calls_at_once_build_each_route_stack_once(function, tenant, racy):
    resolver = resolver_of(FUNCTIONS[function])
    method, path, body = _requests(tenant.key, "x")[function]
    route_of = {}
    saved = _unbuilt(resolver)
    try:
        expected = _call(function, tenant.key, method, path, body)  # alone: the answer and the stack
        built = [r for r in resolver._static_routes + resolver._dynamic_routes if r._middleware_stack_built]
        assert len(built) == 1, "one request builds its route's stack"
        route_of["route"], frames = built[0], _frames(built[0])
        _unbuilt(resolver)  # unbuilt again: the next calls are first calls again
        answers: list[tuple[int, object]] = []
        start = threading.Barrier(THREADS)

        def first_call(i: int) -> None:
            start.wait()
            time.sleep(i * 0.001)  # staggered: each arrives while another's stack is half-built
            answers.append(_call(function, tenant.key, method, path, body))

        threads = [threading.Thread(target=first_call, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert answers == [expected] * THREADS
        assert expected[0] < 500
        assert _frames(route_of["route"]) == frames  # kept as built alone: later calls are answered too
        assert _call(function, tenant.key, method, path, body) == expected
    finally:
        _restore(saved)


def test_the_gateway_builds_every_route_of_every_function_before_serving(database_url, racy):
    """A worker's `preload` builds every stack, each as a first call alone builds it."""
    saved = [s for function in RESOLVED for s in _unbuilt(resolver_of(FUNCTIONS[function]))]
    try:
        LocalGateway(request_log=False).preload()
        for function in RESOLVED:
            resolver = resolver_of(FUNCTIONS[function])
            assert isinstance(resolver, RequestLocalResolver), function
            for route in resolver._static_routes + resolver._dynamic_routes:
                assert route._middleware_stack_built, (function, route.method, route.path)
                frames = _frames(route)
                assert frames[-1] == "_registered_api_adapter" and frames.count("_registered_api_adapter") == 1
                assert len(frames) == len(set(frames)), (function, route.path, frames)
    finally:
        _restore(saved)


def _fresh(resolver_class: type) -> RequestLocalResolver:
    if issubclass(resolver_class, SurfaceResolver):
        return resolver_class(lambda status, code, message, details: {"error": code})
    return resolver_class()


def _authorizer(tenant: str) -> dict:
    return {"authenticated": "true", "tenant_id": tenant, "role": "manage", "key_id": f"key-{tenant}"}


@pytest.mark.parametrize("function", RESOLVED)
def test_two_tenants_interleaved_on_one_resolver_see_only_their_own_request(function):
    """Each surface's resolver class, fresh: a route reads the caller, sleeps while the other tenant's
    requests run on the same resolver, then reads everything of its request again."""
    entry_point(FUNCTIONS[function])
    app = _fresh(type(resolver_of(FUNCTIONS[function])))

    @app.get("/probe/<tag>")
    def probe(tag: str):
        first = app.current_event.request_context.authorizer.get_lambda["tenant_id"]
        if isinstance(app, SurfaceResolver):
            first = app.principal().tenant_id
        time.sleep(0.01)
        return {
            "tag": tag,
            "tenants": [first, app.current_event.request_context.authorizer.get_lambda["tenant_id"]],
            "path": app.current_event.path,
            "route_args": app.context["_route_args"],
            "request_args": app.request.path_parameters,
            "lambda_request": app.lambda_context.aws_request_id,
        }

    seen: list[tuple[str, str, dict]] = []
    failures: list[str] = []

    def tenant_requests(tenant: str) -> None:
        for n in range(10):
            tag = f"{tenant}-{n}"
            context = LocalContext(function)
            event = http_event("GET", f"/probe/{tag}", authorizer=_authorizer(tenant))
            result = app.resolve(event, context)
            if result["statusCode"] != 200:
                failures.append(f"{tag}: {result['statusCode']} {result['body']}")
                continue
            seen.append((tenant, context.aws_request_id, json.loads(result["body"])))

    run_interleaved(tenant_requests, ["tenant-a", "tenant-b"])
    assert failures == []
    assert len(seen) == 20
    for tenant, request_id, answer in seen:
        tag = answer["tag"]
        assert tag.startswith(tenant + "-")
        assert answer["tenants"] == [tenant, tenant]
        assert answer["path"] == f"/probe/{tag}"
        assert answer["route_args"] == answer["request_args"] == {"tag": tag}
        assert answer["lambda_request"] == request_id
