"""The client stands alone: it imports without any server dependency, and `shared/client` builds a
distribution holding only the client (what `pip install ./shared/client` installs)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "shared" / "client"

BLOCKER = """
import importlib.abc, sys
SERVER = {"psycopg", "psycopg_pool", "aws_lambda_powertools", "pydantic", "pulumi", "pulumi_aws", "postbox",
          "functions", "boto3", "httptools", "psutil", "zstandard", "cryptography"}
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in SERVER:
            raise ImportError("server dependency imported by the client: " + name)
sys.meta_path.insert(0, Refuse())
import postbox_client, postbox_client.cli
pb = postbox_client.Client("http://127.0.0.1:9", "k")
postbox_client.cli.parser().parse_args(["queues", "list"])
print("ok", sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in SERVER))
"""


def test_the_client_imports_without_server_dependencies():
    done = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, timeout=120,
                          cwd=str(CLIENT))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok []"


def test_shared_client_builds_a_distribution_of_the_client_alone(tmp_path):
    source = tmp_path / "client"  # a copy: building writes build/ and egg-info next to the sources
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("postbox_client-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "postbox_client/cli/__init__.py" in names and "postbox_client/consume.py" in names
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"postbox_client"}
    meta = next(n for n in names if n.endswith("METADATA"))
    lines = zipfile.ZipFile(wheel).read(meta).decode().splitlines()
    requires = [line for line in lines if line.startswith("Requires-Dist")]
    assert sorted(r.split(":")[1].split(">")[0].strip() for r in requires) == ["httpx", "rich"]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "postbox = postbox_client.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


LAMBDA_PATH = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"httpx", "httpcore", "rich"}:
            raise ImportError("not in the Lambda layers: " + name)
sys.meta_path.insert(0, Refuse())
import functions.api.flows.app
import postbox.flows, postbox.flows.hosted, postbox.flows.local_client
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "postbox_client")
assert loaded == [], "the flows surface and the domain's flows load the client: " + ", ".join(loaded)
import functions.agents.flows_hosted
from functions.agents import flows_runner
from postbox_client.flows import Query, Runner, count
print("ok")
"""


def test_the_functions_run_the_flows_sdk_without_the_http_client_dependencies():
    """The Lambda layers ship neither httpx nor rich: the hosted-flows agent imports the SDK's
    builder and runner from postbox_client without them, and the flows surface (the domain's flows
    with it) does not import the client at all."""
    done = subprocess.run([sys.executable, "-c", LAMBDA_PATH], capture_output=True, text=True, timeout=120,
                          cwd=str(ROOT))
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_functions_carry_the_flows_sdk_and_the_domain_layer_the_domain_alone(tmp_path):
    """The flows agent (functions/) runs the SDK, so the functions' code ships it; the domain layer
    is the `postbox` package, which never imports the client."""
    spec = importlib.util.spec_from_file_location("layers_build", ROOT / "layers" / "build.py")
    layers_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers_build)
    domain = zipfile.ZipFile(layers_build.build_domain(tmp_path / "domain.zip", compile_pyc=False)).namelist()
    assert "python/postbox/flows/hosted.py" in domain
    assert {n.split("/")[1] for n in domain} == {"postbox"}
    functions = zipfile.ZipFile(layers_build.build_functions(tmp_path / "functions.zip", compile_pyc=False)).namelist()
    assert "postbox_client/flows/runner.py" in functions and "functions/agents/flows_runner.py" in functions


def test_the_domain_layer_and_the_functions_ship_byte_compiled(tmp_path):
    """Lambda's code and layer folders are read-only: a module without its .pyc would be compiled
    from source on every cold start. Each .pyc is never revalidated and names the path Lambda
    mounts it at."""
    import pytest

    spec = importlib.util.spec_from_file_location("layers_build", ROOT / "layers" / "build.py")
    layers_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers_build)
    if layers_build.find_python312() is None:
        pytest.skip("no CPython 3.12 here to byte-compile for Lambda's runtime")
    cases = [(layers_build.build_domain(tmp_path / "domain.zip"), "python/postbox/db.py", "/opt/python/postbox/db.py"),
             (layers_build.build_functions(tmp_path / "functions.zip"), "functions/api/queues/app.py",
              "/var/task/functions/api/queues/app.py")]
    for built, module, mounted in cases:
        with zipfile.ZipFile(built) as zf:
            names = set(zf.namelist())
            folder, _, file = module.rpartition("/")
            pyc = f"{folder}/__pycache__/{file[:-3]}.cpython-312.pyc"
            assert module in names and pyc in names, (built.name, pyc)
            sources = {n for n in names if n.endswith(".py")}
            compiled = {n for n in names if n.endswith(".cpython-312.pyc")}
            assert len(compiled) == len(sources), built.name
            code = zf.read(pyc)
        assert code[4:8] == b"\x01\0\0\0"  # unchecked-hash: no timestamp to compare with the source
        assert mounted.encode() in code
