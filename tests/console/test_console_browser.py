"""The web console end to end in a real headless Chromium: log in with a key, see a queue made
through the API listed with its depth, browse its messages, replay a dead letter; and every other
page renders what the API holds. Each page is saved to docs/screenshots/."""

from __future__ import annotations

from playwright.sync_api import expect

from postbox.flows import quotas
from postbox_client import Client, item


def _login(page, gateway, key: str) -> None:
    page.goto(f"{gateway.url}/console")
    page.fill("#key", key)
    page.click("#login button[type=submit]")
    expect(page.locator("#queue-table, #queues p")).to_be_visible()


def test_login_refuses_a_bad_key(page, gateway, screenshot):
    page.goto(f"{gateway.url}/console")
    screenshot(page, "login")
    page.fill("#key", "pbk_wrong")
    page.click("#login button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("That key is not valid.")
    expect(page.locator("#nav")).to_be_hidden()


def test_queue_listed_with_depth_browsed_and_dead_letter_replayed(page, gateway, tenant, screenshot):
    with Client(gateway.url, tenant.key) as pb:
        pb.queues.create("emails-dead")
        pb.queues.create("emails", max_reads=1, dead_letter_queue="emails-dead", visibility_timeout_sec=60)
        poison = pb.queues.send("emails", {"to": "poison@example.com"})
        assert len(pb.queues.read("emails", 1, vt=0)) == 1  # read once, visible again at once...
        assert pb.queues.read("emails", 1, vt=0) == []  # ...so this read moves it to emails-dead
        pb.queues.send_batch("emails", [{"to": "ada@example.com"}, {"to": "bob@example.com"},
                                        {"to": "cy@example.com"}])
        dead = pb.queues.dead_letters("emails")
        assert [m.msg_id for m in dead] == [poison]

    _login(page, gateway, tenant.key)
    with Client(gateway.url, tenant.key) as pb:
        assert pb.queues.metrics("emails").queue_length == 3  # the poison message left for the dead letters
    expect(page.locator('.depth[data-queue="emails"]')).to_have_text("3")
    expect(page.locator('.depth[data-queue="emails-dead"]')).to_have_text("1")
    with Client(gateway.url, tenant.key) as pb:
        pb.queues.send_batch("emails", [{"to": f"user{n}@example.com"} for n in range(5)])
    expect(page.locator('.depth[data-queue="emails"]')).to_have_text("8", timeout=20_000)  # the page refreshes
    screenshot(page, "queues")

    page.click('a.queue-link:text-is("emails")')
    expect(page.locator("#message-table")).to_contain_text("user4@example.com")
    expect(page.locator('#history .history-chart[data-series="depth"] canvas')).to_be_visible()
    screenshot(page, "queue")

    page.click("#tab-dead")
    expect(page.locator("#message-table")).to_contain_text("poison@example.com")
    screenshot(page, "dead-letters")
    page.click(f'button.replay[data-msg="{poison}"]')
    expect(page.locator("#note")).to_contain_text(f"Replayed message {poison} into emails")
    expect(page.locator("#messages")).to_contain_text("No dead messages.")

    with Client(gateway.url, tenant.key) as pb:
        assert pb.queues.dead_letters("emails") == []
        assert pb.queues.metrics("emails-dead").queue_length == 0
        waiting = [m.message["to"] for m in pb.queues.browse("emails").messages]
        assert "poison@example.com" in waiting

    page.click("#tab-waiting")
    expect(page.locator("#message-table")).to_contain_text("poison@example.com")


def test_other_pages_show_what_the_api_holds(page, gateway, tenant, screenshot):
    quotas.grant(tenant.tenant_id)
    with Client(gateway.url, tenant.key) as pb:
        pb.partitioned.configure("orders", leaseTime=60)
        pb.partitioned.push([item("orders", {"total": n}, partition=f"customer-{n % 2}") for n in range(6)])
        popped = pb.partitioned.pop("orders", partition="customer-0", batch=2, consumer_group="analytics")
        pb.partitioned.ack(popped[-1])
        query = pb.flows.register("orders.totals", "orders", "orders.totals", "v1")["query_id"]
        leased = pb.partitioned.pop("orders", partition="customer-1", batch=3, consumer_group=f"streams.{query}")
        committed = pb.flows.cycle({"query_id": query, "partition_id": leased[0].partition_id,
                                    "consumer_group": f"streams.{query}",
                        "state_ops": [{"type": "upsert", "key": "tumb:60\x1f2026-01-01T10:00:00.000Z\x1fcustomer-1",
                                       "value": {"acc": 9, "windowStart": 0, "windowEnd": 60000}}],
                        "ack": {"transactionId": leased[-1].transaction_id, "leaseId": leased[-1].lease_id,
                                "status": "completed"}})
        assert committed["success"], committed
        pb.streams.create("signups", retention="30d")
        pb.streams.subscribe("signups", "welcome-mailer", start="earliest")
        for n in range(3):
            pb.streams.publish("signups", {"user": n}, key=f"user-{n}")
        pb.durable.create("audit")
        pb.durable.append("audit", [{"event": "login"}, {"event": "logout"}])

    _login(page, gateway, tenant.key)
    page.goto(f"{gateway.url}/console#/partitioned/orders")
    expect(page.locator("#partition-table")).to_contain_text("analytics")
    expect(page.locator("#partition-table")).to_contain_text("customer-1")
    screenshot(page, "partitioned")

    page.goto(f"{gateway.url}/console#/flows")
    page.click(f'tr:has-text("customer-1") a:text-is("{query}")')
    expect(page.locator("#state-table")).to_contain_text("customer-1")
    screenshot(page, "flows")

    page.goto(f"{gateway.url}/console#/streams")
    expect(page.locator("#stream-table")).to_contain_text("welcome-mailer")
    page.click('#stream-table a:text-is("signups")')
    expect(page.locator("#subscription-table")).to_contain_text("welcome-mailer")
    screenshot(page, "streams")

    page.goto(f"{gateway.url}/console#/durable/audit")
    tail = page.locator("#tail")
    expect(tail).to_contain_text('{"event":"logout"}')
    with Client(gateway.url, tenant.key) as pb:
        pb.durable.append("audit", {"event": "appended while tailing"})
    expect(tail).to_contain_text("appended while tailing")  # arrives through the live long poll
    screenshot(page, "durable")


def test_work_pages_show_scopes_queues_messages_and_agents(page, gateway, tenant, screenshot):
    with Client(gateway.url, tenant.key) as pb:
        scope = pb.work.create_scope("support", description="customer tickets")
        tickets = pb.work.create_queue(scope, "tickets", ordering="priority", max_retries=1)
        for n in range(3):
            pb.work.publish(scope, tickets, {"title": f"ticket {n}"}, priority={"tier": "high", "score": 900})
        [first] = pb.work.claim(scope, tickets, 1)
        pb.work.complete(scope, first, {"assignee": "ops"})
        [second] = pb.work.claim(scope, tickets, 1)
        pb.work.fail(scope, second, "printer on fire")

    _login(page, gateway, tenant.key)
    page.goto(f"{gateway.url}/console#/work")
    expect(page.locator("#scope-table")).to_contain_text("support")
    expect(page.locator("#agent-table")).to_contain_text("work-visibility-timeout")
    screenshot(page, "work")

    page.click('a.scope-link:text-is("support")')
    expect(page.locator('.pending[data-queue="tickets"]')).to_have_text("1")
    expect(page.locator("#work-queue-table")).to_contain_text("_dead_letter")
    page.click('a.work-queue-link:text-is("tickets")')
    expect(page.locator("#work-message-table")).to_contain_text("ticket 2")
    page.click("#tab-completed")
    expect(page.locator("#work-message-table")).to_contain_text('"assignee":"ops"')
    page.fill("#publish-body", '{"title": "from the console"}')
    page.fill("#publish-type", "ticket.opened")
    page.click("#publish button[type=submit]")
    expect(page.locator("#note")).to_contain_text("Published message")
    expect(page.locator("#work-pending")).to_have_text("2")
    page.click("#tab-pending")
    expect(page.locator("#work-message-table")).to_contain_text("from the console")
    screenshot(page, "work-queue")

    page.goto(f"{gateway.url}/console#/work/{scope['id']}")
    page.click('a.work-queue-link:text-is("_dead_letter")')
    expect(page.locator("#work-message-table")).to_contain_text("printer on fire")
    with Client(gateway.url, tenant.key) as pb:
        [dead] = pb.work.messages(scope, scope["system_queues"]["_dead_letter"], "pending")[0]
        assert dead["body"] == {"title": "ticket 1"}
