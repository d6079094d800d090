"""Every walk-through in the README and docs runs as written against the local gateway.

A walk-through is a document's `sh` code blocks, in order, run as one bash script (so a value
captured in one block is there for the next). The script's own `URL=`, `KEY=` and `ACCOUNT=`
assignments are the only thing changed: they point at this test's gateway and at a fresh tenant
(whose name is `$ACCOUNT`). `curl` fails on an HTTP error unless a line says `|| true`. Blocks
about building, deploying or testing (`make`, `pulumi`, `aws`, `pytest`) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from postbox import tenancy
from postbox.queues import catalog, service

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^\s*(make|pulumi|aws)\b|pytest", re.M)
SETUP = re.compile(r"(^|;\s*|&&\s*)(URL|KEY|ACCOUNT)=(\"[^\"]*\"|\$\([^)]*\)|\S+)", re.M)
PRELUDE = """set -euo pipefail
curl() { local rc=0; command curl --fail-with-body --silent --show-error "$@" || rc=$?; echo; return $rc; }
"""


def walkthrough(doc: str) -> str:
    """The document's runnable `sh` blocks as one script, its setup assignments left to the test."""
    text = (ROOT / doc).read_text()
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if not NOT_RUN.search(b)]
    return "\n".join(SETUP.sub(r"\1:", b) for b in blocks)


RUNNABLE = [doc for doc in DOCS if walkthrough(doc).strip()]


def test_the_harness_finds_the_walkthroughs():
    assert {"README.md", "docs/keyed-streams.md", "docs/partitioned.md", "docs/durable.md"} <= set(RUNNABLE)
    assert walkthrough("README.md").count("curl") > 20


def _run(script: str, gateway, database_url, tmp_path) -> tuple[subprocess.CompletedProcess, str]:
    """`script` run as a fresh tenant's, whose queue ids are never the first ones."""
    account = f"docs-{uuid.uuid4().hex[:8]}"
    tenant_id = tenancy.create_tenant(account, plan="pro")
    key = tenancy.create_key(tenant_id, "manage").key
    # Messages sent before the walk-through: its queues' ids are never the first ones, as on a server in use.
    service.create_queue(tenancy.resolve_key(key), "earlier", {})
    service.send_messages(tenancy.resolve_key(key), "earlier", [1, 2, 3])
    env = {
        **os.environ,
        "URL": gateway.url,
        "KEY": key,
        "ACCOUNT": account,
        "DATABASE_URL": database_url,
        "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
    }
    path = tmp_path / "walkthrough.sh"
    path.write_text(PRELUDE + script)
    return subprocess.run(["bash", str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600), key


@pytest.mark.parametrize("doc", RUNNABLE)
def test_walkthrough_runs_as_written(doc, gateway, database_url, tmp_path):
    run, key = _run(walkthrough(doc), gateway, database_url, tmp_path)
    assert run.returncode == 0, f"{doc} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    if doc == "README.md":  # its archive step archived what its reads returned (ids it cannot know ahead)
        welcome = catalog.get_queue(tenancy.resolve_key(key), "welcome")["metrics"]
        assert (welcome["archived"], welcome["queue_length"]) == (3, 1), welcome  # 1: its CLI's send


def test_the_walkthroughs_run_one_after_another_as_one_tenant(gateway, database_url, tmp_path):
    """As a new user follows them: the README's, then each document's, on the one development tenant,
    so no walk-through trips over names an earlier one made. The tenant its admin commands create is
    renamed (a tenant's name is the whole server's, and the README's own test made it already)."""
    script = "\n".join(walkthrough(doc) for doc in ["README.md", *(d for d in RUNNABLE if d != "README.md")])
    script = re.sub(r"(admin [\w-]+ )acme\b", rf"\g<1>acme-{uuid.uuid4().hex[:8]}", script)
    assert script.count("acme-") >= 5
    run, _ = _run(script, gateway, database_url, tmp_path)
    assert run.returncode == 0, f"failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
