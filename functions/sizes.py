"""The memory table: how many MB each Lambda function gets.

Read by the Pulumi program (a stack's config may still set a kind of function's size as a whole) and
by the cost model, which prices each function's measured CPU and wait split at 256, 512 and 1,024 MB
and prints the size its rule picks beside the size chosen here. The rule: the cheapest warm
invocation; for a function someone waits on (a surface, the migration a deploy waits for), the
cheapest whose warm duration is within 1.5x of the 1,024 MB one and whose cold init (its import CPU
at the size's CPU share) takes at most 2 s. The model does not time flows or sqs: they keep 512 MB.
"""

from __future__ import annotations

SIZES_MB = (256, 512, 1024)  # the sizes the cost model prices every function at

SURFACE_MB: dict[str, int] = {  # by function name in the route table
    "console": 256,
    "queues": 512,
    "keyed-streams": 512,
    "durable": 512,
    "partitioned": 512,
    "flows": 512,
    "work": 512,
    "sqs": 512,
}
SURFACE_DEFAULT_MB = 512  # a surface not in the table yet
AGENT_MB: dict[str, int] = {}  # by agent name in the schedule table, where one differs from the default
AGENT_DEFAULT_MB = 256
MIGRATE_MB = 256


def surface_mb(name: str) -> int:
    return SURFACE_MB.get(name, SURFACE_DEFAULT_MB)


def agent_mb(name: str) -> int:
    return AGENT_MB.get(name, AGENT_DEFAULT_MB)
