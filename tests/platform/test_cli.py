"""`postbox admin` and `postbox migrate` against the test database (DATABASE_URL is set)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import pytest

from functions.local.cli import main
from postbox import tenancy


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tenant_and_key_lifecycle(database_url, capsys):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    code, out, _ = _run(capsys, "admin", "tenant-create", name, "--plan", "pro")
    assert code == 0 and json.loads(out)["plan"] == "pro"
    code, out, _ = _run(capsys, "admin", "key-create", name, "--role", "read", "--project", "web", "--days", "1")
    issued = json.loads(out)
    principal = tenancy.resolve_key(issued["key"])
    assert principal.role == "read" and principal.project_id is not None
    code, out, _ = _run(capsys, "admin", "key-list", name)
    listed = json.loads(out)
    assert [k["key_id"] for k in listed] == [issued["key_id"]] and listed[0]["project"] == "web"
    assert datetime.fromisoformat(listed[0]["created_at"]).tzinfo is not None and "T" in listed[0]["created_at"]
    assert issued["key"] not in out
    code, _, _ = _run(capsys, "admin", "key-revoke", issued["key_id"])
    assert code == 0 and tenancy.resolve_key(issued["key"]) is None


def test_admin_errors_are_one_line_and_exit_1(database_url, capsys):
    code, _, err = _run(capsys, "admin", "key-create", "no-such-tenant")
    assert code == 1 and "no tenant" in err
    name = f"cli-{uuid.uuid4().hex[:8]}"
    _run(capsys, "admin", "tenant-create", name)
    code, _, err = _run(capsys, "admin", "tenant-create", name)
    assert code == 1 and "exists" in err


def test_tenant_plan_moves_a_tenant_to_another_plan(database_url, capsys):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    _run(capsys, "admin", "tenant-create", name)
    code, out, _ = _run(capsys, "admin", "tenant-plan", name, "unlimited")
    assert code == 0 and json.loads(out)["plan"] == "unlimited"
    code, _, err = _run(capsys, "admin", "tenant-plan", name, "platinum")
    assert code == 1 and "no plan named 'platinum'" in err and "unlimited" in err
    code, _, err = _run(capsys, "admin", "tenant-plan", "no-such-tenant", "pro")
    assert code == 1 and "no tenant" in err


def test_migrate_command_is_up_to_date(database_url, capsys):
    code, out, _ = _run(capsys, "migrate")
    assert code == 0 and "up to date" in out


def test_flows_grants(database_url, capsys):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    _run(capsys, "admin", "tenant-create", name)
    code, out, _ = _run(capsys, "admin", "flows-grant", name, "--max-queries", "3")
    assert code == 0 and json.loads(out)["max_queries"] == 3
    code, out, _ = _run(capsys, "admin", "flows-grants")
    assert code == 0 and name in out
    code, out, _ = _run(capsys, "admin", "flows-revoke", name)
    assert code == 0


def test_the_old_streams_grant_names_still_work_with_a_notice(database_url, capsys):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    _run(capsys, "admin", "tenant-create", name)
    code, out, err = _run(capsys, "admin", "streams-grant", name, "--max-queries", "2")
    assert code == 0 and json.loads(out)["max_queries"] == 2
    assert "streams-grant is now flows-grant" in err


def test_projects_are_created_by_name_once(database_url, capsys):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    _run(capsys, "admin", "tenant-create", name)
    code, out, _ = _run(capsys, "admin", "project-create", name, "payments")
    assert code == 0 and json.loads(out)["name"] == "payments"
    code, _, err = _run(capsys, "admin", "project-create", name, "payments")
    assert code == 1 and "already exists" in err
    code, _, err = _run(capsys, "admin", "project-create", name, "x" * 65)
    assert code == 1 and "project name" in err


def test_key_revoke_says_how_long_caches_may_still_accept_the_key(database_url, capsys):
    name = f"cli-{uuid.uuid4().hex[:8]}"
    _run(capsys, "admin", "tenant-create", name)
    _, out, _ = _run(capsys, "admin", "key-create", name)
    code, out, _ = _run(capsys, "admin", "key-revoke", json.loads(out)["key_id"])
    assert code == 0 and "within 30 s" in json.loads(out)["note"]


def test_dev_refuses_a_busy_port_before_starting_anything(capsys, tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["dev", "--port", str(port), "--state-dir", str(tmp_path)])
    assert code == 1 and "in use" in capsys.readouterr().err
    assert not (tmp_path / "pgdata").exists()


def test_dev_refuses_an_unknown_agent_period_before_starting_anything(capsys, tmp_path, monkeypatch):
    import socket

    monkeypatch.setenv("POSTBOX_AGENT_EVERY", "queue-retention=10,no-such-agent=5")
    with socket.socket() as busy:  # checked first: without that check, this one ends the command
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code = main(["dev", "--port", str(busy.getsockname()[1]), "--state-dir", str(tmp_path)])
    assert code == 1 and "no agent named 'no-such-agent'" in capsys.readouterr().err
    assert not (tmp_path / "pgdata").exists()


def test_every_command_has_help_with_defaults(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["dev", "--help"])
    out = capsys.readouterr().out
    assert "POSTBOX_PORT" in out and "default: 127.0.0.1" in out
    with pytest.raises(SystemExit):
        main(["admin", "--help"])
    out = capsys.readouterr().out
    for verb in ("tenant-create", "project-create", "key-create", "key-list", "key-revoke", "flows-grant"):
        assert verb in out


def test_admin_help_lists_no_old_name(capsys):
    """The flows verbs' old `streams-*` names still run (with a notice) but are not offered."""
    with pytest.raises(SystemExit):
        main(["admin", "--help"])
    out = capsys.readouterr().out
    assert "flows-grant" in out and "streams-grant" not in out
