"""The route table: every HTTP route Postbox serves and the function that serves it.

One source of truth, read by the Pulumi program (one API Gateway route per row), by the local
gateway (which matches requests against it exactly as API Gateway would) and by the tests that
prove each function's resolver serves exactly its rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache


@dataclass(frozen=True)
class Route:
    """One API Gateway route: `METHOD /path/{param}` served by the function `function`."""

    function: str
    method: str
    path: str

    @property
    def route_key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def resolver_path(self) -> str:
        """The same path in the Powertools resolver's `<param>` syntax."""
        return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\+?\}", r"<\1>", self.path)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """A regex matching request paths, with named groups for the path parameters."""
        out, pos = [], 0
        for m in re.finditer(r"\{([A-Za-z_][A-Za-z0-9_]*)(\+?)\}", self.path):
            out.append(re.escape(self.path[pos : m.start()]))
            out.append(f"(?P<{m.group(1)}>.+)" if m.group(2) else f"(?P<{m.group(1)}>[^/]+)")
            pos = m.end()
        out.append(re.escape(self.path[pos:]))
        return re.compile("^" + "".join(out) + "$")


def _rows(function: str, *pairs: tuple[str, str]) -> list[Route]:
    return [Route(function, method, path) for method, path in pairs]


QUEUES = "/api/v1/queues"
SQS = "/sqs"  # SQS's endpoint: its sends go into the same queues
WORK = "/v1/modules/scaiqueue"
WORK_QUEUE = WORK + "/scopes/{scope_id}/queues/{queue_id}"
WORK_RULES = WORK + "/scopes/{scope_id}/routing-rules"
WORK_SCHEMAS = WORK + "/scopes/{scope_id}/schemas"
WORK_SUB = WORK + "/scopes/{scope_id}/subscriptions/{sub_id}"
WORK_ACL = WORK + "/scopes/{scope_id}/acl"
WORK_KEYS = WORK + "/tenants/{tenant_id}/api-keys"
DURABLE_HOSTED = "/{account}/{stream}"  # the hosted form's stream: `{stream}` is `s.{name}`
DURABLE_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS")

ROUTES: tuple[Route, ...] = tuple(
    []
    + _rows("console", ("GET", "/console"), ("GET", "/console/{asset}"))  # the web console's static files
    + _rows(
        "queues",
        ("GET", QUEUES),
        ("POST", QUEUES),
        ("GET", QUEUES + "/{name}"),
        ("PATCH", QUEUES + "/{name}"),
        ("DELETE", QUEUES + "/{name}"),
        ("GET", QUEUES + "/{name}/metrics"),
        ("GET", QUEUES + "/{name}/history"),
        ("POST", QUEUES + "/{name}/send"),
        ("POST", QUEUES + "/{name}/send_batch"),
        ("POST", QUEUES + "/{name}/read"),
        ("POST", QUEUES + "/{name}/pop"),
        ("POST", QUEUES + "/{name}/archive"),
        ("POST", QUEUES + "/{name}/delete"),
        ("DELETE", QUEUES + "/{name}/messages/{msg_id}"),
        ("POST", QUEUES + "/{name}/set_vt"),
        ("POST", QUEUES + "/{name}/purge"),
        ("GET", QUEUES + "/{name}/messages"),
        ("POST", "/api/v1/sqs/credentials"),  # SQS credentials (the SQS endpoint is the sqs function's)
        ("GET", "/api/v1/sqs/credentials"),
        ("DELETE", "/api/v1/sqs/credentials/{access_key_id}"),
    )
    + _rows(
        "keyed-streams",
        ("GET", "/v1/projects"),
        ("POST", "/v1/projects"),
        ("GET", "/v1/streams"),
        ("POST", "/v1/streams"),
        ("GET", "/v1/streams/{stream}"),
        ("PATCH", "/v1/streams/{stream}"),
        ("DELETE", "/v1/streams/{stream}"),
        ("GET", "/v1/streams/{stream}/history"),
        ("GET", "/v1/streams/{stream}/messages"),
        ("POST", "/v1/streams/{stream}/messages"),
        ("POST", "/v1/streams/{stream}/messages/batch"),
        ("GET", "/v1/streams/{stream}/messages/{offset}"),
        ("POST", "/v1/streams/{stream}/messages/{offset}/cancel"),
        ("GET", "/v1/streams/{stream}/subscriptions"),
        ("POST", "/v1/streams/{stream}/subscriptions"),
        ("GET", "/v1/streams/{stream}/subscriptions/{subscription}"),
        ("DELETE", "/v1/streams/{stream}/subscriptions/{subscription}"),
        ("GET", "/v1/streams/{stream}/subscriptions/{subscription}/dead"),
        ("POST", "/v1/streams/{stream}/subscriptions/{subscription}/consume"),
        ("POST", "/v1/streams/{stream}/subscriptions/{subscription}/ack"),
        ("POST", "/v1/streams/{stream}/subscriptions/{subscription}/nack"),
    )
    + _rows(
        "durable",
        *[(method, path) for path in ("/v1/stream/{name}", DURABLE_HOSTED) for method in DURABLE_METHODS],
        ("DELETE", DURABLE_HOSTED + "/snapshot/parts"),
        ("POST", DURABLE_HOSTED + "/snapshot/{offset}/parts"),
        *[(method, DURABLE_HOSTED + "/snapshot/{offset}") for method in ("GET", "HEAD", "PUT")],
        ("PUT", DURABLE_HOSTED + "/retention/{offset}"),
        *[(method, DURABLE_HOSTED + path) for path in ("/bootstrap", "/incarnation/{token}/chunk/{offset}",
                                                        "/incarnation/{token}/snapshot/{offset}")
          for method in ("GET", "HEAD")],
        # any other path under a stream: 404, or 405 when a row above serves it with another method
        *[(method, DURABLE_HOSTED + "/{rest+}") for method in DURABLE_METHODS],
    )
    + _rows(
        "partitioned",
        ("POST", "/api/v1/configure"),
        ("POST", "/api/v1/push"),
        ("GET", "/api/v1/pop/queue/{queue}"),
        ("GET", "/api/v1/pop/queue/{queue}/partition/{partition}"),
        ("POST", "/api/v1/ack"),
        ("POST", "/api/v1/ack/batch"),
        ("POST", "/api/v1/lease/{leaseId}/extend"),
        ("POST", "/api/v1/transaction"),
        ("GET", "/api/v1/dlq"),
        ("POST", "/api/v1/dlq/replay"),
        ("GET", "/api/v1/resources/queues/{queue}"),
        ("GET", "/api/v1/resources/queues/{queue}/history"),
        ("DELETE", "/api/v1/resources/queues/{queue}"),
        ("GET", "/api/v1/resources/queues"),
        ("GET", "/api/v1/resources/overview"),
        ("DELETE", "/api/v1/consumer-groups/{group}"),
        ("POST", "/api/v1/fetch"),
        ("POST", "/api/v1/traces"),
        ("GET", "/health"),
        # any other /api/v1 route: 404 in Queen's error shape (more specific rows always win)
        *[(method, "/api/v1/{path+}") for method in ("GET", "POST", "PUT", "PATCH", "DELETE")],
    )
    + _rows(
        "flows",
        ("POST", "/streams/v1/queries"),
        ("POST", "/streams/v1/state/get"),
        ("POST", "/streams/v1/state/due"),
        ("POST", "/streams/v1/cycle"),
    )
    + _rows(
        "work",
        ("POST", WORK + "/scopes"),
        ("GET", WORK + "/scopes"),
        ("GET", WORK + "/scopes/{scope_id}"),
        ("DELETE", WORK + "/scopes/{scope_id}"),
        *[("POST", WORK + "/scopes/{scope_id}/" + action)
          for action in ("pause", "resume", "drain", "archive", "unarchive")],
        ("POST", WORK + "/scopes/{scope_id}/queues"),
        ("GET", WORK + "/scopes/{scope_id}/queues"),
        ("GET", WORK_QUEUE),
        ("DELETE", WORK_QUEUE),
        ("GET", WORK_QUEUE + "/stats"),
        ("GET", WORK_QUEUE + "/history"),
        ("POST", WORK_QUEUE + "/pause"),
        ("POST", WORK_QUEUE + "/resume"),
        ("POST", WORK_QUEUE + "/messages"),
        ("GET", WORK_QUEUE + "/messages"),
        ("POST", WORK_QUEUE + "/messages/batch"),
        ("POST", WORK_QUEUE + "/messages/claim"),
        ("GET", WORK_QUEUE + "/messages/{msg_id}"),
        ("GET", WORK + "/scopes/{scope_id}/messages"),
        *[("POST", WORK + "/scopes/{scope_id}/messages/{msg_id}/" + action)
          for action in ("complete", "fail", "release", "extend", "cancel")],
        *[("POST", WORK + "/scopes/{scope_id}/messages/" + action + "-batch")
          for action in ("complete", "fail", "release")],
        ("GET", WORK + "/system-agents"),
        ("POST", WORK_RULES),
        ("GET", WORK_RULES),
        ("POST", WORK_RULES + "/test"),
        ("GET", WORK_RULES + "/{rule_id}"),
        ("PATCH", WORK_RULES + "/{rule_id}"),
        ("DELETE", WORK_RULES + "/{rule_id}"),
        ("POST", WORK_RULES + "/{rule_id}/enable"),
        ("POST", WORK_RULES + "/{rule_id}/disable"),
        ("POST", WORK_SCHEMAS),
        ("GET", WORK_SCHEMAS),
        ("GET", WORK_SCHEMAS + "/{name}/{version}"),
        ("DELETE", WORK_SCHEMAS + "/{name}/{version}"),
        ("POST", WORK_SCHEMAS + "/{name}/{version}/validate"),
        ("PUT", WORK_QUEUE + "/schema"),
        ("POST", WORK + "/scopes/{scope_id}/hitl-patterns"),
        ("GET", WORK + "/scopes/{scope_id}/hitl-patterns"),
        ("GET", WORK + "/scopes/{scope_id}/hitl-patterns/{name}/{version}"),
        ("POST", WORK + "/scopes/{scope_id}/hitl-patterns/{name}/expand"),
        ("POST", WORK + "/scopes/{scope_id}/subscriptions"),
        ("GET", WORK + "/scopes/{scope_id}/subscriptions"),
        ("GET", WORK_SUB),
        ("PATCH", WORK_SUB),
        ("DELETE", WORK_SUB),
        *[("POST", WORK_SUB + "/" + action) for action in ("pause", "resume", "claim")],
        ("GET", WORK_SUB + "/deliveries"),
        *[("POST", WORK_SUB + "/messages/{msg_id}/" + action) for action in ("complete", "fail", "release")],
        ("POST", WORK + "/subscriptions/{sub_id}/check-processed"),
        ("GET", WORK + "/scopes/{scope_id}/streams"),
        ("GET", WORK + "/scopes/{scope_id}/streams/{stream_id}"),
        ("POST", WORK + "/scopes/{scope_id}/streams/{stream_id}/cancel"),
        ("GET", WORK + "/scopes/{scope_id}/streams/{stream_id}/assembled"),
        ("GET", WORK_ACL),
        *[("POST", WORK_ACL + "/" + part) for part in ("grants", "queue-acl", "trusted-scopes")],
        ("DELETE", WORK_ACL + "/grants/{grant_id}"),
        ("DELETE", WORK_ACL + "/queue-acl/{entry_id}"),
        ("DELETE", WORK_ACL + "/trusted-scopes/{trust_id}"),
        ("POST", WORK_KEYS),
        ("GET", WORK_KEYS),
        ("GET", WORK_KEYS + "/{key_id}"),
        ("POST", WORK_KEYS + "/{key_id}/rotate"),
        ("POST", WORK_KEYS + "/{key_id}/revoke"),
        ("GET", WORK + "/whoami"),
        ("GET", WORK + "/tenants/{tenant_id}"),
        ("GET", WORK + "/tenants/{tenant_id}/audit"),
        ("POST", WORK + "/tenants/{tenant_id}/data-erasure"),
        ("GET", WORK + "/tenants/{tenant_id}/data-erasure/jobs/{job_id}"),
        ("POST", WORK + "/tenants/{tenant_id}/data-export"),
        ("GET", WORK + "/tenants/{tenant_id}/data-export/jobs/{job_id}"),
        ("GET", WORK + "/tenants/{tenant_id}/data-export/jobs/{job_id}/download"),
        ("GET", WORK + "/scopes/{scope_id}/audit"),
        ("GET", WORK + "/scopes/{scope_id}/audit/trace/{correlation_id}"),
        ("GET", WORK + "/scopes/{scope_id}/audit/stats"),
    )
    # SQS's endpoint, its queue URLs as request targets, and the API's root for clients that cannot
    # give an endpoint a path (kombu's SQS transport); GET carries the Query protocol's parameters in
    # its query string; SigV4 is verified by the function
    + _rows("sqs", ("POST", SQS), ("POST", SQS + "/{account}/{queue}"), ("POST", "/"),
            ("GET", SQS), ("GET", SQS + "/{account}/{queue}"))
    # (each surface adds its own `+ _rows("<function>", ...)` block above this line)
)

# Each surface function: its handler entry point (module:function) inside the `functions` package.
FUNCTIONS: dict[str, str] = {
    "console": "functions.api.console.app.handler",
    "queues": "functions.api.queues.app.handler",
    "keyed-streams": "functions.api.keyed_streams.app.handler",
    "durable": "functions.api.durable.app.handler",
    "partitioned": "functions.api.partitioned.app.handler",
    "flows": "functions.api.flows.app.handler",
    "work": "functions.api.work.app.handler",
    "sqs": "functions.api.sqs.app.handler",
    # (each surface adds its function above this line)
}


def routes_for(function: str) -> list[Route]:
    return [r for r in ROUTES if r.function == function]


def _specificity(route: Route) -> tuple[int, ...]:
    """API Gateway prefers, segment by segment, a static segment to a variable and a variable to a
    greedy `{proxy+}`; a lower tuple is more specific."""
    return tuple(
        2 if seg.endswith("+}") else 1 if seg.startswith("{") else 0 for seg in route.path.strip("/").split("/")
    )


@cache
def _candidates(method: str) -> tuple[Route, ...]:
    """The routes a request with this method could match, most specific first (the order API
    Gateway picks in), computed once per method."""
    found = [r for r in ROUTES if r.method in (method, "ANY")]
    return tuple(sorted(found, key=lambda r: (_specificity(r), r.method == "ANY")))


@lru_cache(maxsize=4096)
def _match(method: str, path: str) -> tuple[Route, tuple[tuple[str, str], ...]] | None:
    for route in _candidates(method):
        m = route.pattern.match(path)
        if m:
            return route, tuple(m.groupdict().items())
    return None


def match(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """Find the route API Gateway would pick for a request, with its path parameters (a busy
    server sees the same few paths again and again: the answer is remembered)."""
    found = _match(method.upper(), path)
    if found is None and len(path) > 1 and path.endswith("/"):
        found = _match(method.upper(), path.rstrip("/"))  # API Gateway routes `/a/` as `/a`
    if found is None:
        return None
    return found[0], dict(found[1])
