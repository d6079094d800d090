"""The client verbs of the `postbox` command against the local gateway: JSON for scripts, tables
for people, bulk sends and replays with progress bars, `--help` with defaults everywhere, settings
from flags, environment or the config file; and the server command handing them over."""

from __future__ import annotations

import json
import re
import sys

import pytest

from functions.local import cli as server_cli
from postbox_client import Client
from postbox_client import cli as client_cli


@pytest.fixture
def run(gateway, tenant, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("POSTBOX_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("POSTBOX_URL", raising=False)
    monkeypatch.delenv("POSTBOX_KEY", raising=False)

    def go(*argv: str, code: int = 0, json_out: bool = True):
        capsys.readouterr()
        args = [*argv, "--url", gateway.url, "--key", tenant.key] + (["--json"] if json_out else [])
        assert client_cli.main(args) == code
        out = capsys.readouterr()
        if json_out and code == 0:
            lines = [line for line in out.out.splitlines() if line.strip()]
            return [json.loads(line) for line in lines] if len(lines) != 1 else json.loads(lines[0])
        return out

    return go


def test_queue_verbs_with_json(run, tmp_path):
    assert run("queues", "create", "mail", "--vt", "45")["visibility_timeout_sec"] == 45
    first = run("queues", "send", "mail", '{"to": "ada"}')["msg_id"]
    batch = tmp_path / "batch.ndjson"
    batch.write_text("".join(json.dumps({"n": n}) + "\n" for n in range(250)))
    assert len(run("queues", "send", "mail", "--file", str(batch))["msg_ids"]) == 250
    [listed] = run("queues", "list")
    assert listed["name"] == "mail" and listed["queue_length"] == 251
    read = run("queues", "read", "mail", "--qty", "2", "--archive")
    assert [m["message"] for m in read] == [{"to": "ada"}, {"n": 0}]
    archived = run("queues", "browse", "mail", "--state", "archived")
    assert {m["msg_id"] for m in archived} == {first, read[1]["msg_id"]} == {m["msg_id"] for m in read}
    out = tmp_path / "export.ndjson"
    run("queues", "export", "mail", "--out", str(out), json_out=False)
    assert len(out.read_text().splitlines()) == 249
    assert run("queues", "purge", "mail")["purged"] == 249


def test_work_verbs(run):
    scope = run("work", "create-scope", "ops")
    queue = run("work", "create-queue", scope["id"], "tickets", "--ordering", "priority")
    assert queue["ordering"] == "priority"
    sent = run("work", "publish", scope["id"], queue["id"], '{"title": "disk full"}', "--correlation-id", "t-1")
    [claimed] = run("work", "claim", scope["id"], queue["id"], "--batch-size", "5")
    assert claimed["id"] == sent["id"] and claimed["body"] == {"title": "disk full"}
    done = run("work", "complete", scope["id"], sent["id"], "--claim-token", claimed["claim_token"],
               "--response", '{"fixed": true}')
    assert done["state"] == "completed"
    [listed] = run("work", "messages", scope["id"], queue["id"], "--state", "completed")
    assert listed["response"] == {"fixed": True}
    assert "tickets" in run("work", "queues", scope["id"], json_out=False).out
    by_slug = run("work", "publish", "ops", "tickets", "by slug")  # slugs work wherever ids do
    assert run("work", "messages", "ops", "tickets")[0]["id"] == by_slug["id"]
    assert "no queue with slug 'nope'" in run("work", "claim", "ops", "nope", code=1, json_out=False).err
    assert "ops" in run("work", "scopes", json_out=False).out
    assert "work-expiry" in run("work", "agents", json_out=False).out
    refused = run("work", "fail", scope["id"], sent["id"], code=1, json_out=False)
    assert "SCAIQUEUE_NOT_CLAIMED" in refused.err


def test_tables_for_people_and_errors_on_stderr(run):
    run("queues", "create", "people")
    run("queues", "send", "people", "plain text")
    table = run("queues", "list", json_out=False).out
    assert "people" in table and "depth" in table
    failed = run("queues", "get", "missing", code=1, json_out=False)
    assert "404 not_found" in failed.err and failed.out == ""


def test_dlq_list_and_replay_with_a_progress_bar(run, gateway, tenant, monkeypatch):
    monkeypatch.setenv("POSTBOX_PROGRESS", "1")
    run("queues", "create", "work-dead")
    run("queues", "create", "work", "--max-reads", "1", "--dlq", "work-dead")
    with Client(gateway.url, tenant.key) as pb:
        for n in range(3):
            pb.queues.send("work", n)
        assert len(pb.queues.read("work", 3, vt=0)) == 3
        assert pb.queues.read("work", 3, vt=0) == []  # all three dead-lettered
    assert sorted(m["message"] for m in run("dlq", "list", "work")) == [0, 1, 2]
    replay = run("dlq", "replay", "work", json_out=False)
    assert "replayed 3 dead letters into work" in replay.out and "replaying work-dead" in replay.err
    assert run("dlq", "list", "work") == []
    assert len(run("queues", "browse", "work")) == 3


def test_partitioned_dlq_replay(run, gateway, tenant):
    with Client(gateway.url, tenant.key) as pb:
        pb.partitioned.configure("jobs", retryLimit=0)
        run("partitioned", "push", "jobs", '{"job": 1}', "--transaction-id", "j-1")
        [leased] = pb.partitioned.pop("jobs")
        pb.partitioned.ack(leased, status="failed")
    listed = run("dlq", "list", "jobs", "--partitioned")
    assert listed["total"] == 1
    assert run("dlq", "replay", "jobs", "--partitioned")["replayed"] == 1
    assert run("partitioned", "show", "jobs")["counters"]["replayed"] == 1


def test_work_publish_from_a_file_of_json_lines_in_batches(run, tmp_path, monkeypatch):
    scope = run("work", "create-scope", "bulk")
    queue = run("work", "create-queue", "bulk", "inbox")
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("".join(json.dumps({"body": {"n": n}, "idempotency_key": f"j-{n}"}) + "\n" for n in range(230)))
    results = run("work", "publish", "bulk", "inbox", "--file", str(lines))
    assert len(results) == 230 and all(r["ok"] and r["status"] == 201 for r in results)
    assert results[0]["line"] == 1 and results[0]["queue_id"] == queue["id"]
    again = run("work", "publish", scope["id"], "inbox", "--file", str(lines), json_out=False)
    assert "published 0, replayed 230, refused 0" in again.out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "ok"}\n{"type": "no body"}\n{"body": "x", "colour": "red"}\n')
    out = run("work", "publish", "bulk", "inbox", "--file", str(bad), code=1, json_out=False)
    assert "published 1, replayed 0, refused 2" in out.out
    assert "line 2: VALIDATION_ERROR: body: Field required" in out.err and "line 3: VALIDATION_ERROR" in out.err
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO('{"body": "from stdin"}\n'))
    [piped] = run("work", "publish", "bulk", "inbox", "--file", "-")
    assert piped["ok"]
    with pytest.raises(SystemExit, match="give a BODY or --file"):
        run("work", "publish", "bulk", "inbox")


def test_streams_durable_and_tail_of_a_closed_durable_stream(run, gateway, tenant):
    run("streams", "create", "signups")
    assert run("streams", "publish", "signups", '{"u": 1}', "--msg-key", "u1")["replayed"] is False
    assert [m["key"] for m in run("streams", "browse", "signups")] == ["u1"]
    run("durable", "create", "log")
    run("durable", "append", "log", '[{"a": 1}, {"a": 2}]')
    assert run("durable", "read", "log")["messages"] == [{"a": 1}, {"a": 2}]
    with Client(gateway.url, tenant.key) as pb:
        pb.durable.close("log")
    assert run("tail", "log", "--offset", "-1") == [{"a": 1}, {"a": 2}]  # ends at the close


def test_streams_publish_from_a_file_of_json_lines_in_batches(run, tmp_path, monkeypatch):
    lines = tmp_path / "orders.jsonl"
    lines.write_text("".join(json.dumps({"payload": {"n": n}, "key": f"k{n % 3}", "idempotency_key": f"o-{n}"}) + "\n"
                             for n in range(230)) + "\n")
    results = run("streams", "publish", "orders", "--file", str(lines))
    assert len(results) == 230 and all(r["ok"] and not r["replayed"] for r in results)
    assert [r["offset"] for r in results] == list(range(230)) and results[0]["line"] == 1
    again = run("streams", "publish", "orders", "--file", str(lines), json_out=False)
    assert "published 0, replayed 230, refused 0" in again.out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"payload": 1}\n{"key": "no payload"}\n{"payload": 2, "colour": "red"}\n')
    out = run("streams", "publish", "orders", "--file", str(bad), code=1, json_out=False)
    assert "published 1, replayed 0, refused 2" in out.out
    assert "line 2: invalid_payload" in out.err and "line 3: invalid_colour" in out.err
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO('{"payload": "from stdin"}\n'))
    [piped] = run("streams", "publish", "orders", "--file", "-")
    assert piped["ok"] and piped["offset"] == 231
    notjson = tmp_path / "notjson.jsonl"
    notjson.write_text("{nope\n")
    with pytest.raises(SystemExit, match="line 1 is not JSON"):
        run("streams", "publish", "orders", "--file", str(notjson))
    with pytest.raises(SystemExit, match="give a PAYLOAD or --file"):
        run("streams", "publish", "orders")


def test_settings_come_from_the_environment_or_the_config_file(gateway, tenant, capsys, monkeypatch, tmp_path):
    config = tmp_path / "config.toml"
    monkeypatch.setenv("POSTBOX_CONFIG", str(config))
    monkeypatch.delenv("POSTBOX_KEY", raising=False)
    monkeypatch.delenv("POSTBOX_URL", raising=False)
    assert client_cli.main(["login", "--url", gateway.url, "--key", tenant.key, "--profile", "local"]) == 0
    assert config.stat().st_mode & 0o077 == 0
    assert client_cli.main(["queues", "list", "--profile", "local", "--json"]) == 0
    assert "queues" not in capsys.readouterr().err
    monkeypatch.setenv("POSTBOX_URL", gateway.url)
    monkeypatch.setenv("POSTBOX_KEY", tenant.key)
    assert client_cli.main(["queues", "create", "from-env", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "from-env"


def test_without_settings_the_url_and_key_are_those_make_dev_wrote(gateway, tenant, capsys, monkeypatch, tmp_path):
    """Run from the checkout, the client reaches `make dev` on whatever port it serves."""
    monkeypatch.setenv("POSTBOX_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("POSTBOX_URL", raising=False)
    monkeypatch.delenv("POSTBOX_KEY", raising=False)
    (tmp_path / ".postbox").mkdir()
    (tmp_path / ".postbox" / "dev-url").write_text(gateway.url + "\n")
    (tmp_path / ".postbox" / "dev-key").write_text(tenant.key + "\n")
    monkeypatch.chdir(tmp_path)
    assert client_cli.main(["queues", "create", "found-by-dev-files", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "found-by-dev-files"


def test_the_server_command_hands_client_verbs_over(run, gateway, tenant, capsys):
    run("queues", "create", "handed")
    capsys.readouterr()
    assert server_cli.main(["queues", "list", "--url", gateway.url, "--key", tenant.key, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "handed"
    with pytest.raises(SystemExit):
        server_cli.main(["--help"])
    named = re.findall(r"[\w-]+", capsys.readouterr().out.split("client commands", 1)[1].split(":", 1)[1])
    (verbs,) = [a.choices for a in client_cli.parser()._actions if isinstance(a.choices, dict)]
    assert [verb for verb in verbs if verb not in named] == []  # every client verb, `work` too


def _leaves(parser, path=()):
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _leaves(child, (*path, name))


def test_every_command_has_help_with_its_defaults(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["postbox"])
    leaves = list(_leaves(client_cli.parser()))
    assert len(leaves) > 20
    for path, _ in leaves:
        with pytest.raises(SystemExit) as done:
            client_cli.main([*path, "--help"])
        assert done.value.code == 0
        text = capsys.readouterr().out
        assert "--json" in text and "--url" in text, path
    with pytest.raises(SystemExit):
        client_cli.main(["queues", "read", "--help"])
    assert "(default: 1)" in capsys.readouterr().out


def test_verbs_go_to_each_surfaces_url_from_postbox_urls(gateway, tenant, capsys, monkeypatch, tmp_path):
    """A stack on function URLs (`surface_urls`): the verbs reach the surface named in POSTBOX_URLS,
    whatever the one URL says; a surface without one of its own uses that URL."""
    monkeypatch.setenv("POSTBOX_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("POSTBOX_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("POSTBOX_KEY", tenant.key)
    monkeypatch.setenv("POSTBOX_URLS", json.dumps({"queues": gateway.url, "work": gateway.url + "/"}))
    assert client_cli.main(["queues", "create", "by-surface", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "by-surface"
    assert client_cli.main(["work", "create-scope", "by-surface", "--json"]) == 0
    capsys.readouterr()
    assert client_cli.main(["streams", "list", "--json"]) == 1  # keyed streams: the one URL, where nothing listens
    assert "127.0.0.1:9" in capsys.readouterr().err


def test_login_saves_each_surfaces_url_and_keeps_them_on_a_later_login(monkeypatch, tmp_path, capsys):
    """`postbox login --urls` (a function-URL stack's surface_urls) writes the profile's urls table,
    which the client then reads; logging in again without --urls keeps it, and another profile's
    tables are left as they were. Values are TOML strings, quotes and backslashes escaped."""
    from postbox_client.config import resolve

    config = tmp_path / "config.toml"
    monkeypatch.setenv("POSTBOX_CONFIG", str(config))
    for name in ("POSTBOX_URL", "POSTBOX_KEY", "POSTBOX_URLS", "POSTBOX_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    urls = {"queues": "https://q.lambda-url.eu-west-1.on.aws/", "work": "https://w.lambda-url.eu-west-1.on.aws"}
    assert client_cli.main(["login", "--profile", "other", "--url", "https://other", "--key", "k1"]) == 0
    assert client_cli.main(["login", "--url", "https://one", "--key", 'pbk_"odd\\', "--urls", json.dumps(urls)]) == 0
    saved = resolve()
    assert saved.url == "https://one" and saved.key == 'pbk_"odd\\'
    assert saved.urls == {"queues": "https://q.lambda-url.eu-west-1.on.aws", "work": urls["work"]}
    assert client_cli.main(["login", "--url", "https://two", "--key", "k2"]) == 0
    again = resolve()
    assert (again.url, again.key, again.urls) == ("https://two", "k2", saved.urls)
    other = resolve(profile="other")
    assert (other.url, other.key, other.urls) == ("https://other", "k1", {})
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        client_cli.main(["login", "--urls", "[1, 2]"])
    assert "--urls" in str(refused.value.code)
