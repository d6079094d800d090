"""Three routers for the lazy-include test (tests/platform/test_cold_imports.py): each module is
included by the first request that reaches it."""
