"""Queen's vendored client suite runs in its own pytest process (test_queen_suite.py), never here."""

collect_ignore = ["queen_client_suite"]
