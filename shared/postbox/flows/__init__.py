"""Flows: streaming queries over partitioned queues (`/streams/v1`).

Domain (one unit of work per call, SQL here): `queries` (registration and its quota gate), `quotas`
(grants), `state` (the state shards), `cycle` (state ops + sink pushes + source ack in one
transaction), `sinks` (the partitioned-queue calls a cycle makes), `hosted` (the hosted queries'
rows), `local_client` (the runner's calls in process).
The SDK (`Query`, `Runner`, windows, aggregates, `HttpClient`) is the Python client's,
`postbox_client.flows`, which the domain never imports: the flows agent runs hosted queries with it
(`functions.agents.flows_runner`).
"""

from .local_client import LocalClient

__all__ = ["LocalClient"]
