"""The local gateway's per-request shortcuts answer exactly what the slow way did: the route match
(sorted once per method, remembered per path) and the request ids (a counter, not a system call)."""

from __future__ import annotations

import re
import threading

from functions.local.events import request_id
from functions.local.lambda_context import LocalContext
from functions.routes import ROUTES, _specificity, match


def _reference_match(method: str, path: str):
    """The route table searched in full for every request, as the gateway first did."""
    candidates = []
    for route in ROUTES:
        if route.method not in (method.upper(), "ANY"):
            continue
        m = route.pattern.match(path)
        if m:
            candidates.append((_specificity(route), route.method == "ANY", route, m.groupdict()))
    if not candidates:
        return None
    candidates.sort(key=lambda c: (c[0], c[1]))
    return candidates[0][2], candidates[0][3]


def _sample_path(path: str) -> str:
    return re.sub(r"\{[^}]+\+\}", "a/b/c", re.sub(r"\{[^}+]+\}", "x1", path))


def test_every_route_matches_as_the_full_search_does():
    paths = {_sample_path(r.path) for r in ROUTES} | {"/nope", "/api/v1/queues/x1/unknown", "/"}
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "get"):
        for path in sorted(paths):
            assert match(method, path) == _reference_match(method, path), (method, path)
            assert match(method, path) == _reference_match(method, path), (method, path)  # remembered


def test_a_remembered_match_hands_out_its_own_parameters():
    _, params = match("POST", "/api/v1/queues/orders/send")
    params["name"] = "changed"
    assert match("POST", "/api/v1/queues/orders/send")[1] == {"name": "orders"}


def test_request_ids_are_unique_across_threads_and_shaped_as_api_gateways():
    ids: list[str] = []

    def draw() -> None:
        ids.extend(request_id() for _ in range(5000))

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == len(set(ids)) == 20000
    assert all(re.fullmatch(r"[A-Za-z0-9+/]{15}=", i) for i in ids)  # as API Gateway's HTTP API request ids
    context_id = LocalContext("queues").aws_request_id
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", context_id)
