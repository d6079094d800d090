"""The resolver every function's routes run on, surface or not: Powertools' HTTP API resolver made
safe for the local gateway's concurrent requests, with routers included on first use. The console
serves its static files on it alone; the surfaces' `SurfaceResolver` (`functions.api.common`) adds
keys, inputs and error envelopes, and with them the domain's modules, which the console never needs."""

from __future__ import annotations

import re
import threading
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder, Route

from functions.api.lazy_routers import LazyRouters


class RequestLocalResolver(APIGatewayHttpResolver):
    """A resolver that may serve several requests of one process at once, as the local gateway has it
    do (a thread per connection); Lambda never does (one request per environment at a time), and
    Powertools is written for that:

    - what `resolve()` keeps per request (the event, the Lambda context, the routing `context` with
      `_route`, `_route_args`, `_request`, and the debug `processed_stack_frames`) Powertools keeps on
      the class or the instance; here each is kept per thread, so no request sees another's;
    - a route builds its middleware stack on its first call by reassigning `_middleware_stack` one
      frame at a time, so two first calls at once chain onto each other's half-built stack (and the
      adapter then calls a frame with the route's arguments: a TypeError, kept for every later
      call). `build_routes()` builds every route's stack before serving (the gateway calls it at a
      worker's start); a route not built yet is built under a lock.

    Routers given to `include_lazily` come in with the first request that reaches them (see
    `functions.api.lazy_routers`); `build_routes()` and the OpenAPI document include them all.
    """

    def __init__(self, **options: Any) -> None:
        self._local = threading.local()
        self._building = threading.Lock()
        self._lazy: LazyRouters | None = None
        super().__init__(**options)

    def include_lazily(self, package: str, prefix: str, rules: list[tuple[str, str]]) -> None:
        """Include `package`'s modules' routers with `prefix` on first use: `rules` are (regex over the
        path below `prefix`, module) pairs, the first match naming the module that serves a path."""
        self._lazy = LazyRouters(self, package, prefix, rules)

    def include_lazy_routers(self) -> None:
        """Every lazily included router now."""
        if self._lazy is not None:
            self._lazy.include_all()

    @property
    def lazy_routers(self) -> LazyRouters | None:
        return self._lazy

    @property
    def current_event(self) -> Any:
        return self._local.event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._local.event = value

    @property
    def lambda_context(self) -> Any:
        return getattr(self._local, "lambda_context", None)

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        self._local.lambda_context = value

    @property
    def context(self) -> dict:
        found = getattr(self._local, "context", None)
        if found is None:
            found = self._local.context = {}
        return found

    @context.setter
    def context(self, value: dict) -> None:
        self._local.context = value

    @property
    def processed_stack_frames(self) -> list[str]:
        found = getattr(self._local, "frames", None)
        if found is None:
            found = self._local.frames = []
        return found

    @processed_stack_frames.setter
    def processed_stack_frames(self, value: list[str]) -> None:
        self._local.frames = value

    def resolve(self, event: dict, context: Any) -> dict:
        # Powertools sets both on `BaseRouter` (every resolver's class), which the properties above
        # shadow for this resolver: these are the values its request reads.
        self._local.event = self._to_proxy_event(event)
        self._local.lambda_context = context
        if self._lazy is not None:
            self._lazy.include_for(self._local.event.path)
        return super().resolve(event, context)

    def get_openapi_schema(self, **options: Any) -> Any:
        self.include_lazy_routers()  # the document describes every route
        return super().get_openapi_schema(**options)

    def build_routes(self) -> int:
        """Include every router and build every route's middleware stack and request model now, before
        the first request (they are what a route's first call would build); the number of routes."""
        self.include_lazy_routers()
        routes = self._static_routes + self._dynamic_routes
        for route in routes:
            if route.enable_validation if route.enable_validation is not None else self._enable_validation:
                _ = route.dependant, route.body_field  # what validation reads (built lazily, idempotent)
            self._build(route)
        return len(routes)

    def _build(self, route: Route) -> None:
        if route._middleware_stack_built:
            return
        with self._building:
            if not route._middleware_stack_built:  # Route.__call__ then finds it built
                route._build_middleware_stack(router_middlewares=self._router_middlewares, app=self)

    def _call_route(self, route: Route, route_arguments: dict[str, str]) -> ResponseBuilder:
        self._build(route)
        return super()._call_route(route, route_arguments)

    @staticmethod
    def _compile_regex(rule: str, base_regex: str = "^{}/?$") -> re.Pattern[str]:
        """Each rule also matches its path with a trailing slash: API Gateway routes `/a/` to the
        route `/a` and hands the function the path as it was asked."""
        return APIGatewayHttpResolver._compile_regex(rule, base_regex)
