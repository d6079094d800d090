"""moto's own SQS tests (tests/test_sqs of moto's sdist, at the moto version the dev extra pins) run in
moto's server mode against Postbox's SQS endpoint: every test not listed in `moto_excluded` must pass.

The sdist is downloaded from PyPI once into build/peers/moto (pip download, cached) and its tests/
folder extracted beside it; nothing of moto's tests is kept in this repository. The tests run in a
pytest process of their own (rootdir in build/, moto's conftest replaced by our plugin
`postbox_moto_plugin`), signed with a manage credential of a fresh tenant, against this session's
gateway.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from moto_excluded import EXCLUDED, excluded_entry, whole_files

from postbox.sqs import credentials, identity

MOTO_VERSION = "5.2.5"  # pinned with the dev extra: the exclusions are this version's tests
HERE = Path(__file__).resolve().parent
PEERS = HERE.parents[1] / "build" / "peers" / "moto"
SUITE = PEERS / MOTO_VERSION  # tests/ of the sdist, and our pytest.ini

PYTEST_INI = """[pytest]
markers =
    aws_verified: moto's mark of a test verified against AWS
"""  # ours, in place of moto's setup.cfg


def moto_tests() -> Path:
    """tests/ of moto's sdist, fetched and extracted once."""
    if (SUITE / "tests" / "test_sqs" / "test_sqs.py").exists():
        return SUITE
    sdist = PEERS / f"moto-{MOTO_VERSION}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", f"moto=={MOTO_VERSION}", "--no-binary", ":all:",
                        "--no-deps", "--quiet", "-d", str(PEERS)], check=True, timeout=600)
    prefix = f"moto-{MOTO_VERSION}/"
    wanted = (prefix + "tests/__init__.py", prefix + "tests/test_sqs/")
    partial = SUITE.with_name(SUITE.name + ".partial")
    for stale in (partial, SUITE):  # what an interrupted extraction left
        shutil.rmtree(stale, ignore_errors=True)
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and m.name.startswith(wanted)]
        for member in members:
            member.name = member.name[len(prefix):]
        archive.extractall(partial, members=members, filter="data")
    partial.rename(SUITE)
    return SUITE


def outcomes(report: Path) -> dict[str, str]:
    """Each test case of a JUnit report: passed, or its failure, error or skip."""
    found: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        bad = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[f"{case.get('classname')}::{case.get('name')}"] = bad[0] if bad else "passed"
    return found


@pytest.mark.timeout(900)
def test_moto_sqs_tests_pass_against_postbox(gateway, tenant, tmp_path):
    installed = importlib.metadata.version("moto")
    assert installed == MOTO_VERSION, f"moto {installed} is installed; the excluded tests are {MOTO_VERSION}'s"
    suite = moto_tests()
    (suite / "pytest.ini").write_text(PYTEST_INI)
    pair = credentials.mint(tenant.tenant_id, "manage", name="moto's SQS tests")
    report, deselected = tmp_path / "moto-sqs.xml", tmp_path / "deselected.json"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_", "TEST_"))},
        "TEST_SERVER_MODE": "true",
        "TEST_SERVER_MODE_ENDPOINT": f"{gateway.url}/sqs",
        "AWS_ENDPOINT_URL_SQS": f"{gateway.url}/sqs",
        "AWS_ACCESS_KEY_ID": pair["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": pair["secret_access_key"],
        "AWS_DEFAULT_REGION": identity.region(),
        "POSTBOX_ACCOUNT_ID": identity.account_id(tenant.tenant_id),
        "POSTBOX_QUEUES_URL": f"{gateway.url}/api/v1/queues",  # the reset deletes there (see the plugin)
        "POSTBOX_API_KEY": tenant.key,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(suite)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "POSTBOX_MOTO_DESELECTED": str(deselected),
    }
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_sqs", "-c", str(suite / "pytest.ini"), "--rootdir", str(suite),
         "--noconftest", "-p", "postbox_moto_plugin", "-p", "no:cacheprovider", "-p", "no:asyncio",
         "-o", "timeout=120", f"--junitxml={report}", "-o", "junit_family=xunit1", "-q", "-rfEs", "--durations=15"],
        cwd=suite, env=env, capture_output=True, text=True, timeout=850,
    )
    (PEERS / "last-run.txt").write_text(run.stdout + run.stderr)  # the whole of it, for reading a failure
    out = run.stdout[-30000:] + run.stderr[-5000:]
    assert report.exists(), out
    found = outcomes(report)
    excluded: dict[str, list[str]] = json.loads(deselected.read_text())
    print(f"moto {MOTO_VERSION}'s SQS tests against Postbox: {len(found)} run, {dict(Counter(found.values()))}; "
          f"{sum(map(len, excluded.values()))} excluded, and files not collected: {sorted(whole_files())}")
    for reason, tests in excluded.items():
        print(f"  {len(tests):3d} excluded: {reason}")
    matched = {excluded_entry(test) for tests in excluded.values() for test in tests}
    stale = [entry for entries in EXCLUDED.values() for entry in entries if "::" in entry and entry not in matched]
    assert not stale, f"excluded tests that moto {MOTO_VERSION} does not have: {stale}"
    not_passed = {name: outcome for name, outcome in found.items() if outcome != "passed"}
    assert found, out
    assert not not_passed, f"{len(not_passed)} of {len(found)} of moto's SQS tests did not pass: {not_passed}\n{out}"
    assert run.returncode == 0, out
