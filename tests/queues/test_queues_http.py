"""The queues surface over HTTP through the local gateway: every route and status of the spec."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from functools import partial

from postbox import db
from postbox.queues import consumer_functions
from support.http import client
from support.interleaved import each_at_once


def _create(api, name="emails", **settings):
    r = api.post("/api/v1/queues", json={"name": name, **settings})
    assert r.status_code == 201, r.text
    return r.json()


def test_the_slice_create_send_read_archive(api):
    q = _create(api, "welcome", visibility_timeout_sec=60)
    assert q["name"] == "welcome" and q["visibility_timeout_sec"] == 60 and len(q["queue_id"]) == 32
    sent = api.post("/api/v1/queues/welcome/send", json={"message": {"to": "ada@example.com"}, "delay": 0})
    assert sent.status_code == 201
    msg_id = sent.json()["msg_id"]
    read = api.post("/api/v1/queues/welcome/read", json={"qty": 10, "vt": 120})
    assert read.status_code == 200
    [m] = read.json()["messages"]
    assert m["msg_id"] == msg_id and m["read_ct"] == 1 and m["message"] == {"to": "ada@example.com"}
    assert m["headers"] is None and 119 < m["vt"] - time.time() < 121
    # Hidden for vt seconds: a second read sees nothing.
    assert api.post("/api/v1/queues/welcome/read", json={"qty": 10}).json() == {"messages": []}
    archived = api.post("/api/v1/queues/welcome/archive", json={"msg_ids": [msg_id]})
    assert archived.status_code == 200 and archived.json() == {"archived": [msg_id]}
    browse = api.get("/api/v1/queues/welcome/messages", params={"state": "archived"}).json()
    assert [x["msg_id"] for x in browse["messages"]] == [msg_id]
    assert browse["messages"][0]["archived_at"] is not None


def test_visibility_expiry_redelivers(api):
    _create(api, "vt")
    api.post("/api/v1/queues/vt/send", json={"message": 1})
    first = api.post("/api/v1/queues/vt/read", json={"vt": 1}).json()["messages"]
    assert len(first) == 1
    time.sleep(1.2)
    again = api.post("/api/v1/queues/vt/read", json={"vt": 30}).json()["messages"]
    assert [m["msg_id"] for m in again] == [first[0]["msg_id"]] and again[0]["read_ct"] == 2


def test_missing_or_wrong_key_is_401(gateway, database_url):
    for key in (None, "pbx_nope", "not-a-key"):
        with client(gateway.url, key) as anon:
            r = anon.get("/api/v1/queues")
            assert r.status_code == 401 and "detail" in r.json()
            assert anon.post("/api/v1/queues", json={"name": "x"}).status_code == 401


def test_bearer_key_is_accepted(gateway, tenant):
    with client(gateway.url, tenant.key, header="bearer") as c:
        assert c.get("/api/v1/queues").status_code == 200


def test_unknown_route_is_404_json(api):
    r = api.get("/api/v1/nothing-here")  # /api/v1 is shared with the partitioned surface: Queen's error shape
    assert r.status_code == 404 and r.json() == {"error": "no such route: GET /api/v1/nothing-here"}


def test_list_has_limits_usage_and_oldest_age(api):
    _create(api, "a")
    _create(api, "b")
    api.post("/api/v1/queues/a/send_batch", json={"messages": [1, 2, 3]})
    body = api.get("/api/v1/queues").json()
    assert [q["name"] for q in body["queues"]] == ["a", "b"]
    a = body["queues"][0]
    assert a["queue_length"] == 3 and a["sent_total"] == 3 and a["metrics"]["oldest_msg_age_sec"] >= 0
    assert body["queues"][1]["metrics"]["oldest_msg_age_sec"] is None
    assert set(body["limits"]) == {"max_queues", "messages_month", "max_message_bytes", "storage_bytes",
                                   "retention_days"}
    assert body["usage"]["queues"] == 2 and body["usage"]["stored_bytes"] > 0
    assert body["project_id"] == a["project_id"]


def test_create_validation_and_conflicts(api):
    assert api.post("/api/v1/queues", json={}).status_code == 422
    r = api.post("/api/v1/queues", json={"name": 5})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "name"]
    assert api.post("/api/v1/queues", json={"name": "x", "max_reads": "5"}).status_code == 422
    assert api.post("/api/v1/queues", json={"name": "x", "visibility_timeout_sec": 43201}).status_code == 422
    assert api.post("/api/v1/queues", content=b"{not json", headers={"content-type": "application/json"}
                    ).status_code == 422
    for bad in ("Emails", "1abc", "a" * 49, "a.b", ""):
        r = api.post("/api/v1/queues", json={"name": bad})
        assert r.status_code in (400, 422), bad
    assert api.post("/api/v1/queues", json={"name": "Bad"}).status_code == 400
    _create(api, "taken")
    r = api.post("/api/v1/queues", json={"name": "taken"})
    assert r.status_code == 409 and "taken" in r.json()["detail"]


def test_dead_letter_queue_rules(api):
    r = api.post("/api/v1/queues", json={"name": "src", "dead_letter_queue": "missing"})
    assert r.status_code == 404
    _create(api, "dlq2")
    _create(api, "dlq1", dead_letter_queue="dlq2")
    r = api.post("/api/v1/queues", json={"name": "src", "dead_letter_queue": "dlq1"})
    assert r.status_code == 400
    q = _create(api, "src", dead_letter_queue="dlq2")
    assert q["dead_letter_queue"] == "dlq2"
    # dlq2 is now a dead-letter queue: it cannot get one of its own.
    _create(api, "other")
    assert api.patch("/api/v1/queues/dlq2", json={"dead_letter_queue": "other"}).status_code == 400
    # Deleting a queue in use as a dead-letter queue is refused.
    r = api.delete("/api/v1/queues/dlq2")
    assert r.status_code == 409
    assert api.patch("/api/v1/queues/src", json={"dead_letter_queue": None}).json()["dead_letter_queue"] is None
    api.patch("/api/v1/queues/dlq1", json={"dead_letter_queue": None})
    assert api.delete("/api/v1/queues/dlq2").status_code == 200


def test_dead_letter_links_changed_at_once_end_as_one_after_another(gateway, api):
    """a into b, b into c and c into a at once: one after another, the first lands and each other
    breaks the rule (its target has a dead-letter queue, or it is one), so exactly one lands. Made
    at once, each checked the links before the others had changed them: two or three landed, a chain
    or a loop of dead-letter queues."""
    def link(source: str, target: str) -> int:
        with client(gateway.url, api.tenant.key) as own:
            return own.patch(f"/api/v1/queues/{source}", json={"dead_letter_queue": target}).status_code

    answers: Counter = Counter()
    for _ in range(8):
        a, b, c = (f"{x}-{uuid.uuid4().hex[:6]}" for x in "abc")
        for name in (a, b, c):
            _create(api, name)
        round_ = each_at_once([partial(link, a, b), partial(link, b, c), partial(link, c, a)])
        answers.update(round_)
        links = [api.get(f"/api/v1/queues/{n}").json()["dead_letter_queue"] for n in (a, b, c)]
        assert sum(x is not None for x in links) == 1, (round_, links)
    assert answers == Counter({200: 8, 400: 16}), answers


def test_a_dead_letter_queue_deleted_as_it_is_named_answers_as_one_after_the_other(gateway, api):
    """Naming b as a's dead-letter queue while b is deleted: either a gets b and b's deletion is
    refused (409), or b goes and a's change finds none (404); never a 503 from the foreign key."""
    def name_it(a: str, b: str) -> int:
        with client(gateway.url, api.tenant.key) as own:
            return own.patch(f"/api/v1/queues/{a}", json={"dead_letter_queue": b}).status_code

    def delete(b: str) -> int:
        with client(gateway.url, api.tenant.key) as own:
            return own.delete(f"/api/v1/queues/{b}").status_code

    answers: Counter = Counter()
    for _ in range(8):
        a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
        _create(api, a)
        _create(api, b)
        named, deleted = each_at_once([partial(name_it, a, b), partial(delete, b)])
        answers[named, deleted] += 1
        assert (named, deleted) in ((200, 409), (404, 200)), (named, deleted)
    assert sum(answers.values()) == 8


def test_plan_limits_are_403(gateway, make_tenant):
    t = make_tenant(plan="free")
    with client(gateway.url, t.key) as c:
        r = c.post("/api/v1/queues", json={"name": "long", "retention_days": 30})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "retention_days"
        for i in range(25):
            assert c.post("/api/v1/queues", json={"name": f"q{i}"}).status_code == 201
        r = c.post("/api/v1/queues", json={"name": "one-too-many"})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "max_queues"
        assert c.patch("/api/v1/queues/q0", json={"retention_days": 8}).status_code == 403
        assert c.patch("/api/v1/queues/q0", json={"retention_days": 7}).status_code == 200


def test_monthly_messages_and_storage_used_up_are_403(gateway, make_tenant):
    t = make_tenant(plan="free")
    with client(gateway.url, t.key) as c:
        c.post("/api/v1/queues", json={"name": "q"})
        with db.transaction() as conn:
            conn.execute(
                "INSERT INTO tenant_monthly_messages (tenant_id, month, slot, messages)"
                " VALUES (%s, date_trunc('month', clock_timestamp())::date, 99, 2000000)", (t.tenant_id,))
        r = c.post("/api/v1/queues/q/send", json={"message": 1})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "messages_month"
        with db.transaction() as conn:
            conn.execute("DELETE FROM tenant_monthly_messages WHERE tenant_id = %s AND slot = 99", (t.tenant_id,))
            conn.execute("INSERT INTO tenant_storage (tenant_id, slot, stored_bytes) VALUES (%s, 99, 2147483648)",
                         (t.tenant_id,))
        r = c.post("/api/v1/queues/q/send", json={"message": 1})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "storage_bytes"


def test_send_limits(api):
    _create(api, "q")
    assert api.post("/api/v1/queues/q/send", json={"message": "x" * 1_048_600}).status_code == 413
    assert api.post("/api/v1/queues/q/send", json={"message": 1, "headers": {"h": "x" * 5000}}).status_code == 413
    assert api.post("/api/v1/queues/q/send", json={"message": 1, "delay": 7 * 86400 + 1}).status_code == 422
    assert api.post("/api/v1/queues/q/send", json={"message": 1, "delay": -1}).status_code == 422
    assert api.post("/api/v1/queues/q/send", json={"message": 1, "headers": [1]}).status_code == 422
    assert api.post("/api/v1/queues/missing/send", json={"message": 1}).status_code == 404
    assert api.post("/api/v1/queues/q/send_batch", json={"messages": []}).status_code == 422
    assert api.post("/api/v1/queues/q/send_batch", json={"messages": list(range(101))}).status_code == 422
    r = api.post("/api/v1/queues/q/send_batch", json={"messages": list(range(100)), "headers": {"k": 1}})
    assert r.status_code == 201 and len(r.json()["msg_ids"]) == 100
    assert r.json()["msg_ids"] == sorted(r.json()["msg_ids"])


def test_delay_hides_until_due(api):
    _create(api, "later")
    api.post("/api/v1/queues/later/send", json={"message": 1, "delay": 1})
    assert api.post("/api/v1/queues/later/read").json()["messages"] == []
    metrics = api.get("/api/v1/queues/later/metrics").json()
    assert metrics["delayed"] == 1 and metrics["visible"] == 0
    time.sleep(1.1)
    assert len(api.post("/api/v1/queues/later/read").json()["messages"]) == 1


def test_read_and_pop_bounds_and_order(api):
    _create(api, "q")
    ids = api.post("/api/v1/queues/q/send_batch", json={"messages": list(range(10))}).json()["msg_ids"]
    assert api.post("/api/v1/queues/q/read", json={"qty": 0}).status_code == 422
    assert api.post("/api/v1/queues/q/read", json={"qty": 101}).status_code == 422
    assert api.post("/api/v1/queues/q/read", json={"vt": 43201}).status_code == 422
    got = api.post("/api/v1/queues/q/read", json={"qty": 3}).json()["messages"]
    assert [m["msg_id"] for m in got] == ids[:3] and [m["message"] for m in got] == [0, 1, 2]
    popped = api.post("/api/v1/queues/q/pop", json={"qty": 2}).json()["messages"]
    assert [m["message"] for m in popped] == [3, 4]
    assert api.post("/api/v1/queues/q/pop", json={"qty": 101}).status_code == 422
    assert len(api.post("/api/v1/queues/q/pop").json()["messages"]) == 1
    m = api.get("/api/v1/queues/q/metrics").json()
    assert m["queue_length"] == 7 and m["in_flight"] == 3 and m["visible"] == 4


def test_archive_delete_and_delete_one(api):
    _create(api, "q")
    ids = api.post("/api/v1/queues/q/send_batch", json={"messages": [1, 2, 3, 4]}).json()["msg_ids"]
    assert api.post("/api/v1/queues/q/archive", json={"msg_ids": []}).status_code == 422
    assert api.post("/api/v1/queues/q/archive", json={"msg_ids": list(range(1001))}).status_code == 422
    assert api.post("/api/v1/queues/q/archive", json={"msg_ids": ["a"]}).status_code == 422
    assert api.post("/api/v1/queues/q/archive", json={"msg_ids": [ids[0], 999999999]}).json() == {
        "archived": [ids[0]]}
    assert api.post("/api/v1/queues/q/delete", json={"msg_ids": [ids[1]]}).json() == {"deleted": [ids[1]]}
    assert api.delete(f"/api/v1/queues/q/messages/{ids[2]}").json() == {"deleted": [ids[2]]}
    assert api.delete(f"/api/v1/queues/q/messages/{ids[2]}").status_code == 404
    assert api.delete("/api/v1/queues/q/messages/abc").status_code == 422
    m = api.get("/api/v1/queues/q/metrics").json()
    assert m["queue_length"] == 1 and m["archived"] == 1 and m["total_messages"] == 4


def test_ids_no_message_can_have_match_nothing(api):
    _create(api, "q")
    [msg_id] = api.post("/api/v1/queues/q/send_batch", json={"messages": [1]}).json()["msg_ids"]
    for op, key in (("archive", "archived"), ("delete", "deleted")):
        answer = api.post(f"/api/v1/queues/q/{op}", json={"msg_ids": [2**64, -1, 0]})
        assert answer.status_code == 200 and answer.json() == {key: []}
    assert api.delete(f"/api/v1/queues/q/messages/{2**64}").status_code == 404
    for bad in (2**64, -5):
        assert api.post("/api/v1/queues/q/set_vt", json={"msg_id": bad, "vt": 0}).status_code == 404
    assert api.post("/api/v1/queues/q/archive", json={"msg_ids": [msg_id, 2**63]}).json() == {"archived": [msg_id]}


def test_numbers_json_cannot_write_are_a_400(api):
    _create(api, "q")
    bodies = {'{"message": NaN}': ["body", "message"], '{"message": {"x": Infinity}}': ["body", "message", "x"],
              '{"message": 1, "headers": {"h": -Infinity}}': ["body", "headers", "h"]}
    for body, loc in bodies.items():  # not JSON, as malformed JSON is: 422 naming the field
        answer = api.post("/api/v1/queues/q/send", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == loc
    assert api.get("/api/v1/queues/q/metrics").json()["queue_length"] == 0


def test_read_gives_back_numbers_exactly_as_sent(api):
    _create(api, "q")
    message = {"big": 2**70, "neg": -(2**64) - 1, "pi": 3.141592653589793, "tenth": 0.1, "digits": "1" * 30,
               "nested": [{"n": 12345678901234567890}], "text": "caf\u00e9 \u2603"}
    api.post("/api/v1/queues/q/send", json={"message": message, "headers": {"trace": 2**65}})
    [read] = api.post("/api/v1/queues/q/read", json={"qty": 1}).json()["messages"]
    assert read["message"] == message and read["headers"] == {"trace": 2**65}


def test_set_vt(api):
    _create(api, "q")
    msg_id = api.post("/api/v1/queues/q/send", json={"message": "x"}).json()["msg_id"]
    r = api.post("/api/v1/queues/q/set_vt", json={"msg_id": msg_id, "vt": 300})
    assert r.status_code == 200 and r.json()["message"]["msg_id"] == msg_id
    assert r.json()["message"]["vt"] - time.time() > 290
    assert api.post("/api/v1/queues/q/read").json()["messages"] == []
    api.post("/api/v1/queues/q/set_vt", json={"msg_id": msg_id, "vt": 0})
    assert len(api.post("/api/v1/queues/q/read").json()["messages"]) == 1
    assert api.post("/api/v1/queues/q/set_vt", json={"msg_id": 999999999, "vt": 1}).status_code == 404
    assert api.post("/api/v1/queues/q/set_vt", json={"msg_id": msg_id}).status_code == 422
    _create(api, "other")
    assert api.post("/api/v1/queues/other/set_vt", json={"msg_id": msg_id, "vt": 1}).status_code == 404


def test_purge(api):
    _create(api, "q")
    ids = api.post("/api/v1/queues/q/send_batch", json={"messages": [1, 2, 3]}).json()["msg_ids"]
    api.post("/api/v1/queues/q/archive", json={"msg_ids": ids[:1]})
    assert api.post("/api/v1/queues/q/purge", json={}).json() == {"purged": 2}
    assert api.post("/api/v1/queues/q/purge", json={"include_archived": "yes"}).status_code == 422
    assert api.post("/api/v1/queues/q/purge", json={"include_archived": True}).json() == {"purged": 1}
    m = api.get("/api/v1/queues/q/metrics").json()
    assert m["queue_length"] == 0 and m["archived"] == 0 and m["stored_bytes"] == 0


def test_browse_states_paging_and_limits(api):
    _create(api, "q")
    ids = api.post("/api/v1/queues/q/send_batch", json={"messages": list(range(5))}).json()["msg_ids"]
    api.post("/api/v1/queues/q/read", json={"qty": 1})
    page = api.get("/api/v1/queues/q/messages", params={"limit": 2}).json()
    assert [m["msg_id"] for m in page["messages"]] == [ids[4], ids[3]] and page["next_before"] == ids[3]
    rest = api.get("/api/v1/queues/q/messages", params={"limit": 10, "before": page["next_before"]}).json()
    assert [m["msg_id"] for m in rest["messages"]] == [ids[2], ids[1], ids[0]] and rest["next_before"] is None
    assert rest["messages"][-1]["in_flight"] is True and rest["messages"][0]["in_flight"] is False
    assert api.get("/api/v1/queues/q/messages", params={"limit": 201}).status_code == 422
    assert api.get("/api/v1/queues/q/messages", params={"state": "nope"}).status_code == 422
    assert api.get("/api/v1/queues/q/messages", params={"state": "dead"}).json()["messages"] == []


def test_max_reads_dead_letters_on_the_exact_read(api):
    _create(api, "dead")
    _create(api, "work", max_reads=2, dead_letter_queue="dead")
    msg_id = api.post("/api/v1/queues/work/send", json={"message": "poison"}).json()["msg_id"]
    for expected_reads in (1, 2):
        [m] = api.post("/api/v1/queues/work/read", json={"vt": 0}).json()["messages"]
        assert m["read_ct"] == expected_reads
    # Read twice, it comes back: the third read moves it instead of handing it out.
    assert api.post("/api/v1/queues/work/read", json={"vt": 0}).json()["messages"] == []
    [moved] = api.post("/api/v1/queues/dead/read").json()["messages"]
    assert moved["msg_id"] == msg_id and moved["message"] == "poison" and moved["read_ct"] == 1
    work = api.get("/api/v1/queues/work").json()
    assert work["dead_total"] == 1 and work["metrics"]["dead_lettered"] == 1 and work["queue_length"] == 0


def test_max_reads_without_dead_letter_queue_archives_as_dead(api):
    _create(api, "work", max_reads=1)
    msg_id = api.post("/api/v1/queues/work/send", json={"message": "poison"}).json()["msg_id"]
    assert len(api.post("/api/v1/queues/work/read", json={"vt": 0}).json()["messages"]) == 1
    assert api.post("/api/v1/queues/work/read").json()["messages"] == []
    dead = api.get("/api/v1/queues/work/messages", params={"state": "dead"}).json()["messages"]
    assert [m["msg_id"] for m in dead] == [msg_id] and dead[0]["dead_lettered"] is True


def test_get_patch_delete_and_404s(api):
    send_email = consumer_functions.prefix(api.tenant.tenant_id) + "send-email"
    _create(api, "q", description="Outgoing mail", consumer={"function_name": send_email, "batch_size": 10})
    q = api.get("/api/v1/queues/q").json()
    assert q["consumer"] == {"function_name": send_email, "enabled": True, "batch_size": 10, "concurrency": 2,
                             "visibility_timeout_sec": None, "ack": "archive", "last_error": ""}
    assert set(q["metrics"]) == {"queue_name", "queue_length", "visible", "in_flight", "delayed",
                                 "oldest_msg_age_sec", "newest_msg_age_sec", "total_messages", "archived",
                                 "dead_lettered", "stored_bytes", "scrape_time"}
    r = api.patch("/api/v1/queues/q", json={"consumer": {"enabled": False}})
    assert r.status_code == 200
    assert r.json()["consumer"]["enabled"] is False and r.json()["consumer"]["function_name"] == send_email
    assert r.json()["description"] == "Outgoing mail"
    assert api.patch("/api/v1/queues/q", json={"consumer": {"ack": "keep"}}).status_code == 422
    assert api.patch("/api/v1/queues/q", json={"max_reads": 0}).status_code == 422
    assert api.patch("/api/v1/queues/q", json={"max_reads": 3}).json()["max_reads"] == 3
    assert api.patch("/api/v1/queues/q", json={"max_reads": None}).json()["max_reads"] is None
    assert api.patch("/api/v1/queues/missing", json={}).status_code == 404
    assert api.get("/api/v1/queues/missing").status_code == 404
    assert api.get("/api/v1/queues/missing/metrics").status_code == 404
    api.post("/api/v1/queues/q/send_batch", json={"messages": [1, 2]})
    assert api.delete("/api/v1/queues/q").json() == {"deleted": True, "name": "q", "messages_deleted": 2}
    assert api.get("/api/v1/queues/q").status_code == 404
    assert api.delete("/api/v1/queues/q").status_code == 404


def test_another_tenants_queue_is_404(gateway, api, make_tenant):
    _create(api, "private")
    api.post("/api/v1/queues/private/send", json={"message": 1})
    other = make_tenant()
    with client(gateway.url, other.key) as c:
        assert c.get("/api/v1/queues/private").status_code == 404
        assert c.post("/api/v1/queues/private/send", json={"message": 1}).status_code == 404
        assert c.post("/api/v1/queues/private/read").status_code == 404
        assert c.post("/api/v1/queues/private/archive", json={"msg_ids": [1]}).status_code == 404
        assert c.get("/api/v1/queues").json()["queues"] == []


def test_app_send_lets_the_anon_key_send_and_nothing_else(gateway, api):
    _create(api, "closed")
    _create(api, "open", app_send=True)
    anon_key = api.tenant.key_for("anon")
    with client(gateway.url, anon_key) as anon:
        assert anon.post("/api/v1/queues/open/send", json={"message": "hi"}).status_code == 201
        assert anon.post("/api/v1/queues/closed/send", json={"message": "hi"}).status_code == 404
        assert anon.post("/api/v1/queues/open/read").status_code == 401
        assert anon.get("/api/v1/queues").status_code == 401
        assert anon.post("/api/v1/queues", json={"name": "x"}).status_code == 401


def test_roles_limit_what_a_key_may_do(gateway, api):
    _create(api, "q")
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        assert reader.get("/api/v1/queues/q").status_code == 200
        assert reader.post("/api/v1/queues/q/send", json={"message": 1}).status_code == 403
    with client(gateway.url, api.tenant.key_for("write")) as writer:
        assert writer.post("/api/v1/queues/q/send", json={"message": 1}).status_code == 201
        assert writer.post("/api/v1/queues", json={"name": "new"}).status_code == 403


def test_long_poll_read_wakes_on_send(api, notify_only):
    import threading

    _create(api, "lp")
    got = {}

    def reader():
        got["messages"] = api.post("/api/v1/queues/lp/read", json={"wait_seconds": 10}).json()["messages"]

    t = threading.Thread(target=reader)
    t.start()
    notify_only.wait_until_asleep()
    api.post("/api/v1/queues/lp/send", json={"message": "wake"})
    t.join(15)
    assert [m["message"] for m in got["messages"]] == ["wake"]
    assert notify_only.woken == [True]
    assert api.post("/api/v1/queues/lp/read", json={"wait_seconds": 21}).status_code == 422


def test_long_poll_returns_empty_after_the_wait(api):
    _create(api, "lp")
    t0 = time.monotonic()
    assert api.post("/api/v1/queues/lp/read", json={"wait_seconds": 1}).json() == {"messages": []}
    assert time.monotonic() - t0 >= 0.9  # it waited rather than answering at once


def test_concurrent_requests_of_two_tenants_stay_apart(gateway, make_tenant):
    """The local gateway runs requests on threads of one process: no request may see another's event."""
    import threading

    tenants = [make_tenant(), make_tenant()]
    for i, t in enumerate(tenants):
        with client(gateway.url, t.key) as c:
            assert c.post("/api/v1/queues", json={"name": f"only-{i}"}).status_code == 201
    wrong = []

    def hammer(i):
        with client(gateway.url, tenants[i % 2].key) as c:
            for _ in range(25):
                names = [q["name"] for q in c.get("/api/v1/queues").json()["queues"]]
                if names != [f"only-{i % 2}"]:
                    wrong.append(names)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
