"""What a cell's parts are built from: the names, sizes and options its component gives them.

The cell's component (infra/cells.py) builds its network groups, secrets and database through the
modules that know each; they take it as this shape, so none of them needs the component itself.
"""

from __future__ import annotations

from typing import Any, Protocol

import pulumi


class Cell(Protocol):
    first: bool  # the first cell: today's resource names
    physical: str  # the cluster's and proxy's name
    spec: Any  # the cell's config: name, capacity, region
    provider: Any  # its region's provider when that is not the stack's, else None

    def logical(self, name: str) -> str: ...

    def opts(self, **options: Any) -> pulumi.ResourceOptions: ...  # in the stack's region

    def in_region(self, **options: Any) -> pulumi.ResourceOptions: ...  # in the cell's
