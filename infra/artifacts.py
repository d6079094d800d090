"""Where the program finds the repo and the zips that `python layers/build.py` writes.

Pulumi runs the program with the working directory set to `infra/` when `main: infra/` is used
(and to the repo root otherwise), so paths are resolved from this file, never from the cwd.
Archives are handed to Pulumi by path and only read by the engine at deploy time: a test under
mocks, or a preview, does not need them built.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pulumi

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
DEPS_ZIP = BUILD / "layers" / "deps.zip"
DOMAIN_ZIP = BUILD / "layers" / "domain.zip"
FUNCTIONS_ZIP = BUILD / "functions.zip"
MIGRATIONS = REPO / "shared" / "postbox" / "sql"
REQUIREMENTS = REPO / "layers" / "requirements.txt"


def archive(path: Path) -> pulumi.FileArchive:
    if not path.exists():
        pulumi.log.warn(f"{path.relative_to(REPO)} is missing: run `make layers` before `pulumi up`")
    # Relative to the cwd, so the path recorded in the state is the same on every machine.
    return pulumi.FileArchive(os.path.relpath(path, os.getcwd()))


def migrations_sha256(directory: Path = MIGRATIONS) -> str:
    """sha256 over every *.sql under postbox/sql/ (table migrations and functions files), by path
    order: changes iff any of them changes, so the migrate function runs exactly then."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*.sql"), key=lambda p: p.relative_to(directory).as_posix()):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def layer_requirements() -> set[str]:
    """The distribution names in layers/requirements.txt (lower case, no extras or versions)."""
    names = set()
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(re.split(r"[\[<>=!~;\s]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return names
