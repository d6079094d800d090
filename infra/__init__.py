"""The Pulumi program that deploys Postbox to AWS (entry point: infra/__main__.py).

A package so the tests can import its component modules as `infra.<module>`. No module here
creates a resource at import time: `infra.stack.build()` does, so the program can run many times
in one process (once per test scenario under Pulumi mocks).
"""
