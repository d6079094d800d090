"""The Python examples of docs/client.md run as written, in order, against the local gateway, as a
fresh tenant with a flows grant (the shell examples are run by tests/platform/test_docs_walkthroughs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from postbox.flows import quotas

ROOT = Path(__file__).resolve().parents[2]


def test_python_examples_run(gateway, tenant, tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "client.md").read_text(), re.S)
    assert len(blocks) >= 7
    quotas.grant(tenant.tenant_id)
    script = tmp_path / "examples.py"
    script.write_text("\n".join(blocks))
    env = {**os.environ, "POSTBOX_URL": gateway.url, "POSTBOX_KEY": tenant.key,
           "POSTBOX_CONFIG": str(tmp_path / "none.toml")}
    done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sending to a@example.com" in done.stdout and "sending to b@example.com" in done.stdout
    assert "True [{'key': 'total'" in done.stdout  # the flows cycle committed and its state reads back
