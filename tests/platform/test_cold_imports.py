"""What a function's cold import leaves for first use: each function is imported in a fresh
interpreter, as Lambda's init phase does, and what its requests do not all need must not be loaded
by then, yet come in with the first request that needs it, however many arrive at once (timings
are bench/gateway.py's job, never a test's)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from functions.api.common import SurfaceResolver
from functions.api.lazy_routers import LazyRouters
from functions.api.work import app as work_app
from functions.api.work.envelope import MOUNT
from functions.local.events import http_event
from functions.local.lambda_context import LocalContext
from functions.routes import FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(module: str, *then: str) -> set[str]:
    """The modules a fresh interpreter holds after importing `module` (and running `then`)."""
    code = "\n".join([f"import sys, {module}", *then, "import json; print(json.dumps(sorted(sys.modules)))"])
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def _packages(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_no_function_imports_jsonschema_before_a_schema_is_used(function):
    module = FUNCTIONS[function].rpartition(".")[0]
    assert _packages(_loaded_after(module)) & {"jsonschema", "referencing", "jsonschema_specifications"} == set()


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_no_function_imports_zstandard_before_a_batch_may_be_compressed(function):
    module = FUNCTIONS[function].rpartition(".")[0]
    assert "zstandard" not in _packages(_loaded_after(module))


def test_the_log_engine_imports_zstandard_with_its_first_compressed_batch():
    small = _loaded_after("postbox.log_engine.frames", "from postbox.log_engine import frames",
                          "assert frames.unpack(*frames.compress(b'x' * 10)) == b'x' * 10")
    assert "zstandard" not in small
    big = _loaded_after("postbox.log_engine.frames", "from postbox.log_engine import frames",
                        "codec, stored = frames.compress(b'x' * 4096)",
                        "assert codec == frames.ZSTD and frames.unpack(codec, stored) == b'x' * 4096")
    assert "zstandard" in big


def test_request_model_modules_do_not_postpone_their_annotations():
    """Pydantic would parse and compile each postponed annotation's text as it makes the class."""
    modules = [ROOT / "functions/api/common_schema.py", *sorted((ROOT / "functions/api").glob("*/schema.py"))]
    assert len(modules) >= 5
    assert [str(m.relative_to(ROOT)) for m in modules if "from __future__ import annotations" in m.read_text()] == []


def test_the_durable_function_reads_the_route_table_only_to_answer_a_path_it_does_not_serve():
    assert "functions.routes" not in _loaded_after("functions.api.durable.app")
    then = _loaded_after("functions.api.durable.app", "from functions.api.durable import hosted",
                         "assert hosted._served('GET', '/acme/s.orders/snapshot/1')")
    assert "functions.routes" in then


def test_the_sqs_function_reads_the_query_protocol_only_when_a_query_request_arrives():
    query = ("functions.api.sqs.query", "functions.api.sqs.query_model")
    assert not set(query) & _loaded_after("functions.api.sqs.app")
    then = _loaded_after(
        "functions.api.sqs.app", "from functions.api.sqs import app",
        "from functions.local.events import http_event", "from functions.local.lambda_context import LocalContext",
        "event = http_event('POST', '/sqs', headers={'content-type': 'application/x-www-form-urlencoded'}, "
        "body='Action=ListQueues')",
        "answer = app.handler(event, LocalContext('sqs'))",  # unsigned: refused, in the Query protocol's XML
        "assert answer['statusCode'] == 403 and '<Code>MissingAuthenticationToken</Code>' in answer['body']")
    assert set(query) <= then


def test_the_queues_function_reads_the_sqs_credentials_routes_with_the_first_request_to_them():
    module = "functions.api.queues.sqs_credentials"
    assert module not in _loaded_after("functions.api.queues.app")
    then = _loaded_after(
        "functions.api.queues.app", "from functions.api.queues import app",
        "from functions.local.events import http_event", "from functions.local.lambda_context import LocalContext",
        "answer = app.handler(http_event('GET', '/api/v1/sqs/credentials'), LocalContext('queues'))",
        "assert answer['statusCode'] == 401 and 'No valid session' in answer['body'], answer")  # no key
    assert module in then


def test_the_work_schemas_import_jsonschema_when_a_schema_is_first_checked():
    loaded = _loaded_after("postbox.work.schemas",
                           "from postbox.work import schemas",
                           "assert schemas.errors_of(schemas._validator('s', {'type': 'integer'}), 'x')")
    assert "jsonschema" in loaded


# ---- the work function's routers, each included by the first request that reaches it ---------------

WORK_MODULES = tuple(dict.fromkeys(module for _, module in work_app.ROUTERS))


def _template(rule: str) -> list[str | None]:
    """A resolver rule's segments, None for a parameter (the resolver's `[^/]+`)."""
    return [None if part.startswith("<") else part for part in rule.strip("/").split("/")]


def _work_routes() -> list[tuple[str, str, str]]:
    """(module, method, rule below the mount) of every route of every work router, and the app's own."""
    found = []
    for module in WORK_MODULES:
        router = importlib.import_module(f"functions.api.work.{module}").router
        found += [(module, key[1], key[0]) for key in router._routes]
    return found + [("app", key[1], key[0]) for key in work_app.router._routes]


def test_the_work_function_imports_no_route_module_at_import():
    loaded = _loaded_after("functions.api.work.app")
    assert {f"functions.api.work.{m}" for m in WORK_MODULES} & loaded == set()
    assert "functions.api.work.envelope" in loaded  # what every request needs is in


def test_every_work_route_is_claimed_by_its_own_module_rule():
    rules = LazyRouters(None, "functions.api.work", MOUNT, work_app.ROUTERS)
    routes = _work_routes()
    assert {m for m, _, _ in routes} == {*WORK_MODULES, "app"}
    for module, method, rule in routes:
        path = MOUNT + re.sub(r"<(\w+)>", r"p-\1", rule)
        assert rules.module_for(path) == (None if module == "app" else module), (method, rule)
        assert rules.module_for(path + "/") == rules.module_for(path)  # a trailing slash is the same route


def test_no_two_work_modules_have_routes_that_match_one_path():
    """So the order in which modules come in never changes which route serves a request."""
    routes = _work_routes()
    clashes = []
    for i, (module, method, rule) in enumerate(routes):
        for other, other_method, other_rule in routes[i + 1:]:
            a, b = _template(rule), _template(other_rule)
            if module != other and method == other_method and len(a) == len(b) and all(
                    x is None or y is None or x == y for x, y in zip(a, b, strict=True)):
                clashes.append((method, rule, other_rule))
    assert clashes == []


def test_the_route_modules_come_in_on_first_use():
    """A fresh resolver, three routers of its own: each included by the first request to it alone."""
    app = SurfaceResolver(lambda status, code, message, details: {"error": code}, anonymous=True)
    app.include_lazily("support.lazy_routers", "/m", [(r"/a(/|$)", "alpha"), (r"/b", "beta"), (r"/c", "gamma")])

    def get(path: str) -> tuple[int, str]:
        answer = app.resolve(http_event("GET", path), LocalContext("lazy"))
        return answer["statusCode"], answer["body"]

    assert get("/m/a/1") == (200, '{"module":"alpha","id":"1"}')
    assert app.lazy_routers.included() == {"alpha"}
    assert get("/m/nothing")[0] == 404 and get("/m/a/1/more")[0] == 404
    assert app.lazy_routers.included() == {"alpha"}
    assert get("/m/b") == (200, '{"module":"beta"}')
    assert app.lazy_routers.included() == {"alpha", "beta"}
    app.build_routes()
    assert app.lazy_routers.included() == {"alpha", "beta", "gamma"}
    assert get("/m/c") == (200, '{"module":"gamma"}')


_FIRST_CALLS = """
import json, sys, threading
sys.path.insert(0, "tests")
from functions.api.work import app as work
from functions.local.lambda_context import LocalContext
from support.events import api_event

key, requests, per_module = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
before = sorted(m for m in sys.modules if m.startswith("functions.api.work."))
def call(method, path):
    answer = work.handler(api_event(method, path, key=key), LocalContext("work"))
    body = json.loads(answer["body"])
    body.pop("meta", None)
    return answer["statusCode"], body
calls = [r for r in requests for _ in range(per_module)]
start = threading.Barrier(len(calls))
answers = [None] * len(calls)
def first(i):
    start.wait()
    answers[i] = call(*calls[i][1:])
threads = [threading.Thread(target=first, args=(i,)) for i in range(len(calls))]
[t.start() for t in threads]
[t.join(120) for t in threads]
after = [call(*r[1:]) for r in requests]
print(json.dumps({"before": before, "first": answers, "after": after}))
"""


def test_the_first_requests_to_every_work_module_at_once_are_each_answered(tenant):
    """A fresh work function: three requests to each of its modules, all at once, each the first its
    module sees (a module being included while another thread's request to it waits or matches):
    every one is answered as the same request is once every module is in."""
    from postbox import jsoncodec
    from postbox.work import scopes

    scope = json.loads(jsoncodec.dumps(scopes.create_scope(tenant.principal, {"slug": "lazy"})))["id"]
    unknown = "00000000-0000-4000-8000-000000000000"
    requests = [
        ("scopes", "GET", f"{MOUNT}/scopes/{scope}"),
        ("queues", "GET", f"{MOUNT}/scopes/{scope}/queues"),
        ("messages", "GET", f"{MOUNT}/scopes/{scope}/queues/{unknown}/messages"),
        ("rules", "GET", f"{MOUNT}/scopes/{scope}/routing-rules"),
        ("schemas", "GET", f"{MOUNT}/scopes/{scope}/schemas"),
        ("hitl", "GET", f"{MOUNT}/scopes/{scope}/hitl-patterns"),
        ("subscriptions", "GET", f"{MOUNT}/scopes/{scope}/subscriptions"),
        ("chunks", "GET", f"{MOUNT}/scopes/{scope}/streams"),
        ("acl", "GET", f"{MOUNT}/scopes/{scope}/acl"),
        ("keys", "GET", f"{MOUNT}/whoami"),
        ("gdpr", "GET", f"{MOUNT}/tenants/{tenant.tenant_id}/data-export/jobs/{unknown}"),
        ("audit", "GET", f"{MOUNT}/scopes/{scope}/audit"),
    ]
    assert {r[0] for r in requests} == set(WORK_MODULES)
    out = subprocess.run([sys.executable, "-c", _FIRST_CALLS, tenant.key, json.dumps(requests), "3"], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert [m for m in seen["before"] if m.rpartition(".")[2] in WORK_MODULES] == []
    first = seen["first"]
    assert len(first) == 3 * len(requests)
    for i, (module, method, path) in enumerate(requests):
        expected = seen["after"][i]
        assert expected[0] in (200, 404) and expected[1].get("error", {}).get("message") != "No such route.", (
            module, expected)
        assert first[3 * i: 3 * i + 3] == [expected] * 3, (module, method, path)
