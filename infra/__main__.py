"""Pulumi entry point (Pulumi.yaml: `main: infra/`). Deploys Postbox; see docs/deploy.md.

Pulumi runs this file as a script with `infra/` first on sys.path (and as the cwd). That would
let `import functions` find infra/functions.py instead of the repo's `functions` package (the
route and schedule tables), so the repo root goes first and infra/ itself comes off the path;
the components are imported as the `infra` package.
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() not in (_HERE, _HERE.parent)]

import pulumi  # noqa: E402

from infra import stack  # noqa: E402

for _key, _value in stack.build().items():
    pulumi.export(_key, _value)
