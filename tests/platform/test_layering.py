"""Imports run one way: `functions` → `postbox` (the domain, shared/postbox); the client
(`postbox_client`, shared/client) stands alone; no project module imports itself round a cycle; and
the domain reads the environment and makes AWS clients in one place each (`postbox.config`,
`postbox.aws`).

Every module is parsed, not imported, and every import counts, a function's own included: a lazy
import is still a dependency, and a cycle through one only waits for the first call to bite.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the package folders: a module's name is its path below its folder's parent
PACKAGES = {"functions": ROOT / "functions", "postbox": ROOT / "shared" / "postbox",
            "postbox_client": ROOT / "shared" / "client" / "postbox_client", "infra": ROOT / "infra"}
ENVIRONMENT_AND_AWS = {"postbox.config", "postbox.aws"}  # the domain's only ports to its deployment


def _modules() -> dict[str, Path]:
    found = {}
    for top, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((top, *parts))] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, int]]:
    """Every module `name` imports (absolute names, third-party ones too) with the line."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    package = name if _is_package(name) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from pkg import sub` imports the submodule; `from mod import name` the module
            subs = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in MODULES]
            found += [(sub, node.lineno) for sub in subs]
            if len(subs) < len(node.names):
                found.append((source, node.lineno))
    return found


def _project_target(imported: str) -> str | None:
    """The project module an import loads (`postbox.db.pool` → `postbox.db`), or None."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for imported, _ in _imports(name):
            target = _project_target(imported)
            if target and target != name:
                graph[name].add(target)
    return graph


def _violations(prefix: str, forbidden: set[str]) -> list[str]:
    return [f"{MODULES[name].relative_to(ROOT)}:{line} imports {imported}"
            for name in MODULES if name == prefix or name.startswith(prefix + ".")
            for imported, line in _imports(name) if imported.split(".")[0] in forbidden]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle from each strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_a_cycle(graph, component) for component in components]


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest way from the component's first module back to itself."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    return sorted(component)


def test_the_modules_are_found():
    assert {"postbox.config", "postbox.db", "postbox_client.flows.runner", "functions.routes",
            "infra.functions"} <= MODULES.keys()


def test_the_domain_imports_neither_the_functions_the_infrastructure_nor_the_client():
    assert _violations("postbox", {"functions", "infra", "postbox_client"}) == []


def test_the_client_imports_nothing_of_the_server():
    assert _violations("postbox_client", {"postbox", "functions", "infra"}) == []


def test_no_project_module_imports_itself_round_a_cycle():
    cycles = [" -> ".join(cycle) for cycle in _cycles(_graph())]
    assert cycles == []


def test_the_domain_reads_its_environment_and_makes_aws_clients_in_one_place():
    found = []
    for name, path in MODULES.items():
        if not name.startswith("postbox.") or name in ENVIRONMENT_AND_AWS:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "putenv"):
                found.append(f"{where} os.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "os" and not node.level:
                found += [f"{where} from os import {a.name}" for a in node.names
                          if a.name in ("environ", "getenv", "environb", "putenv")]
        found += [f"{path.relative_to(ROOT)}:{line} imports {imported}" for imported, line in _imports(name)
                  if imported.split(".")[0] in ("boto3", "botocore", "aioboto3")]
    assert found == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]


NETWORK = ("socket", "ssl", "http.client", "urllib.request", "httpx", "requests", "urllib3", "aiohttp")
# Modules that use `socket` on the database's own connections only, never on an address a tenant
# names: the listener wakes its thread with a socket pair; the liveness watch shuts down the
# connections of a server that stopped answering.
DATABASE_SOCKETS = ("postbox.listener", "postbox.liveness")
# The streaming runtime speaks to Lambda's Runtime API (AWS_LAMBDA_RUNTIME_API), the one address
# Lambda gives it, never one a tenant names.
RUNTIME_API = "functions.lambda_runtime"


def test_outbound_http_goes_through_one_module():
    """A call to an address a tenant names has one way out, `postbox.outbound` (its checks: see
    there); the local runtime's own server and command line serve, they call no tenant's address."""
    found = [f"{MODULES[name].relative_to(ROOT)}:{line} imports {imported}"
             for name in MODULES if name.startswith(("postbox.", "functions."))
             and name not in ("postbox.outbound", RUNTIME_API) and not name.startswith("functions.local")
             for imported, line in _imports(name)
             if any(imported == module or imported.startswith(module + ".") for module in NETWORK)
             and not (name in DATABASE_SOCKETS and imported == "socket")]
    assert found == []
