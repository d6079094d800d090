"""The work surface's domain: scopes own queues; messages are published, claimed and finished.

Each module does one job (scopes, queues, publish and claims, browsing, agents' sweeps, rate
limits). Every function takes the caller's principal, checks its operation with
`tenancy.require`, and answers another tenant's resource exactly like a missing one.
"""
