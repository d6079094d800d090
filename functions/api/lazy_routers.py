"""Routers a resolver includes when a request first reaches them, so that a function's cold import
holds only what every request needs: the work function's dozen route modules (and the domain
modules and request models under each) are about a quarter of its import, and a container may
serve a few of them only.

Which module serves a path is said by a table of rules, (regex over the path below the mount,
module), first match wins, which a test holds to every route of every module; a path no rule
claims includes nothing (the resolver answers its 404). A module's router is included once, under
a lock: the resolver may serve several requests at once (see `RequestLocalResolver`), and the
first requests to one module wait for one include. Routes are only ever appended, so a request
matching meanwhile sees a module's routes all or none; no two modules' routes match one path (the
same test), so the order modules come in never changes which route serves a request.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Sequence
from typing import Any


class LazyPattern:
    """A regular expression compiled when a path is first matched against it. Python compiles one
    in Python code (about 0.4 M instructions for a route's), and Powertools compiles every route's
    as it is registered: a surface's twenty were 0.8 % of a minimal handler's cold import, where a
    container's first requests are matched against a few. `groups` counts the named groups, all a
    route's registration reads of it (a route with path parameters is filed as dynamic)."""

    __slots__ = ("pattern", "groups", "_compiled")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.groups = pattern.count("(?P<")
        self._compiled: re.Pattern[str] | None = None

    def match(self, path: str) -> re.Match[str] | None:
        compiled = self._compiled
        if compiled is None:  # two threads may both compile it: the same pattern either way
            compiled = self._compiled = re.compile(self.pattern)
        return compiled.match(path)


class LazyRouters:
    """The routers of `package`'s modules named by `rules`, each module's `router` included into
    `app` with `prefix` on the first request whose path one of its rules matches."""

    def __init__(self, app: Any, package: str, prefix: str, rules: Sequence[tuple[str, str]]) -> None:
        self._app, self._package, self._prefix = app, package, prefix
        self._rules = [(LazyPattern(pattern), module) for pattern, module in rules]
        self.modules = tuple(dict.fromkeys(module for _, module in rules))  # in the rules' order
        self._pending = set(self.modules)
        self._lock = threading.Lock()

    def module_for(self, path: str) -> str | None:
        """The module whose router serves `path` (None: none of them)."""
        if not path.startswith(self._prefix):
            return None
        below = path[len(self._prefix):]
        return next((module for pattern, module in self._rules if pattern.match(below)), None)

    def include_for(self, path: str) -> None:
        """Include the router that serves `path`, unless it is in already (the one check a warm
        request pays, until every module is in)."""
        if self._pending:
            module = self.module_for(path)
            if module in self._pending:
                self._include(module)

    def include_all(self) -> None:
        """Every router now (a worker's preload, the OpenAPI document, the route-table tests)."""
        for module in self.modules:
            self._include(module)

    def included(self) -> set[str]:
        return set(self.modules) - self._pending

    def _include(self, module: str) -> None:
        with self._lock:
            if module in self._pending:
                router = importlib.import_module(f"{self._package}.{module}").router
                self._app.include_router(router, prefix=self._prefix)
                self._pending.discard(module)
