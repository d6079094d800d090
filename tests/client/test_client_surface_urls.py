"""A stack whose front door is the surfaces' function URLs has one base URL per surface: the client
sends each call to its surface's URL (given as `urls`, POSTBOX_URLS or a profile's `urls` table)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from functions import routes
from postbox_client import Client
from postbox_client.config import resolve
from postbox_client.surfaces import surface_of
from postbox_client.transport import Call

URLS = {"queues": "https://q.lambda-url.eu-west-1.on.aws", "work": "https://w.lambda-url.eu-west-1.on.aws/"}


def _sample(path: str) -> str:
    """A request path for a route's path: its parameters filled in (a hosted stream's as `s.name`)."""
    path = path.replace("{stream}", "s.orders")
    return re.sub(r"\{[A-Za-z_]+\+?\}", "x", path)


def test_every_route_of_the_table_is_its_surfaces_by_path():
    skipped = {"/", "/api/v1/{path+}"}  # SQS's root endpoint and the partitioned surface's catch-all
    wrong = [(r.path, r.function, surface_of(_sample(r.path))) for r in routes.ROUTES
             if r.path not in skipped and surface_of(_sample(r.path)) != r.function]
    assert wrong == []
    assert len(routes.ROUTES) > 50


def _recording() -> tuple[list[str], httpx.Client]:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"msg_id": 1, "data": [], "meta": {}, "queues": []})

    return seen, httpx.Client(base_url="https://one.example", transport=httpx.MockTransport(answer))


def test_each_call_goes_to_its_surfaces_url():
    seen, http = _recording()
    with Client("https://one.example", "pbx_test", urls=URLS, http=http) as pb:
        pb.queues.send("orders", {"n": 1})
        pb.transport.run(Call("GET", "/v1/modules/scaiqueue/scopes"))
        pb.transport.run(Call("GET", "/api/v1/pop/queue/orders"))
    assert seen == ["https://q.lambda-url.eu-west-1.on.aws/api/v1/queues/orders/send",
                    "https://w.lambda-url.eu-west-1.on.aws/v1/modules/scaiqueue/scopes",
                    "https://one.example/api/v1/pop/queue/orders"]  # no URL of its own: the stack's


def test_surface_urls_from_the_environment_or_the_profile(monkeypatch, tmp_path):
    monkeypatch.delenv("POSTBOX_URL", raising=False)
    monkeypatch.setenv("POSTBOX_URLS", json.dumps(URLS))
    assert resolve(key="k").urls == {"queues": URLS["queues"], "work": URLS["work"].rstrip("/")}
    monkeypatch.delenv("POSTBOX_URLS")
    config = tmp_path / "config.toml"
    config.write_text('[default]\nkey = "k"\n[default.urls]\nqueues = "https://q.example/"\n')
    monkeypatch.setenv("POSTBOX_CONFIG", str(config))
    assert resolve().urls == {"queues": "https://q.example"}
    monkeypatch.setenv("POSTBOX_URLS", "[1, 2]")
    with pytest.raises(ValueError):
        resolve()
