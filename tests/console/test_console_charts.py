"""The console's history charts in a real headless Chromium: a queue's, a work queue's, a partitioned
queue's and a keyed stream's page each draws its depth, oldest age and messages in and out per minute
from the minutes Postbox recorded (uPlot, served by the console itself, under its content security
policy), as points on the canvas, for the last hour and, toggled, the last day."""

from __future__ import annotations

from datetime import timedelta

import httpx
from playwright.sync_api import expect

from postbox import db, history
from postbox_client import Client, item

MINUTES = 24  # recorded minutes, one every two minutes over the last 48


def _ink(page, series: str, color: tuple[int, int, int]) -> int:
    """Pixels of the chart's canvas drawn in the series' colour (its line and points)."""
    return page.evaluate(
        """([series, [r, g, b]]) => {
            const canvas = document.querySelector(`#history .history-chart[data-series="${series}"] canvas`);
            const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
            let n = 0;
            for (let i = 0; i < px.length; i += 4) {
                if (Math.abs(px[i] - r) < 12 && Math.abs(px[i + 1] - g) < 12 && Math.abs(px[i + 2] - b) < 12
                    && px[i + 3] > 200) n += 1;
            }
            return n;
        }""", [series, list(color)])


def _charts_drawn(page, points: int) -> None:
    for series in ("depth", "age", "rate"):
        expect(page.locator(f'#history .history-chart[data-series="{series}"]')).to_have_attribute(
            "data-points", str(points))
    legend = page.locator('#history .history-chart[data-series="rate"] .u-legend')
    expect(legend).to_contain_text("in")
    expect(legend).to_contain_text("out")
    expect(page.locator('#history .history-chart[data-series="age"]')).to_contain_text("age")
    assert _ink(page, "depth", (0x2F, 0x5B, 0xEA)) > 50  # the depth line
    assert _ink(page, "rate", (0x1E, 0x8A, 0x4C)) > 50  # messages in


def _login(page, gateway, key: str) -> None:
    page.goto(f"{gateway.url}/console")
    page.fill("#key", key)
    page.click("#login button[type=submit]")
    expect(page.locator("#queue-table, #queues p")).to_be_visible()


def test_history_charts_draw_recorded_minutes_on_every_page(page, gateway, tenant, screenshot):
    csp: list[str] = []
    page.on("console", lambda m: csp.append(m.text) if "Content Security Policy" in m.text else None)
    with Client(gateway.url, tenant.key) as pb:
        pb.queues.create("invoices")
        scope = pb.work.create_scope("billing")
        work = pb.work.create_queue(scope, "payouts")
        pb.partitioned.configure("ledger")
        pb.streams.create("payments")
        pb.streams.subscribe("payments", "auditor", start="earliest")
        with db.connection() as conn:
            now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
        for n in range(MINUTES):  # traffic that rises and falls, a minute recorded after each step
            sent, taken = 3 + (n * 7) % 11, 2 + (n * 5) % 9
            pb.queues.send_batch("invoices", [{"invoice": n, "i": i} for i in range(sent)])
            got = pb.queues.read("invoices", taken, vt=60)
            pb.queues.delete_messages("invoices", [m.msg_id for m in got])
            for i in range(sent // 2):
                pb.work.publish(scope, work, {"payout": n, "i": i})
            for m in pb.work.claim(scope, work, taken // 2):
                pb.work.complete(scope, m)
            pb.partitioned.push([item("ledger", {"entry": n, "i": i}, partition=f"p{i % 2}") for i in range(sent)])
            for m in pb.partitioned.pop("ledger", batch=taken, consumer_group="books"):
                pb.partitioned.ack(m)
            pb.streams.publish_batch("payments", [{"payload": {"n": n, "i": i}} for i in range(sent)])
            got = pb.streams.consume("payments", "auditor", max_messages=taken)
            if got:
                pb.streams.ack("payments", "auditor", [m.receipt for m in got])
            history.record(now - timedelta(minutes=2 * (MINUTES - n)))

    _login(page, gateway, tenant.key)
    expect(page.locator('tr:has(a:text-is("invoices")) svg.spark polyline')).to_have_count(1)

    page.goto(f"{gateway.url}/console#/queues/invoices")
    expect(page.locator("#history")).to_have_attribute("data-window", "hour")
    _charts_drawn(page, MINUTES)
    over = page.locator('#history .history-chart[data-series="rate"] .u-over')
    box = over.bounding_box()
    over.hover(position={"x": box["width"] * 0.8, "y": box["height"] / 2})  # the legends read that minute
    screenshot(page, "charts", full_page=False)
    page.click('#history button[data-window="day"]')
    expect(page.locator("#history")).to_have_attribute("data-window", "day")
    _charts_drawn(page, MINUTES)

    page.goto(f"{gateway.url}/console#/work/{scope['id']}/{work['id']}")
    _charts_drawn(page, MINUTES)
    page.goto(f"{gateway.url}/console#/partitioned/ledger")
    _charts_drawn(page, MINUTES)
    page.goto(f"{gateway.url}/console#/streams/payments?project=default")
    _charts_drawn(page, MINUTES)
    assert csp == []


def test_a_resource_with_no_recorded_minute_says_so(page, gateway, tenant):
    with Client(gateway.url, tenant.key) as pb:
        pb.queues.create("fresh")
    _login(page, gateway, tenant.key)
    page.goto(f"{gateway.url}/console#/queues/fresh")
    expect(page.locator('#history .history-chart[data-series="depth"]')).to_have_attribute("data-points", "0")
    expect(page.locator("#history .history-note")).to_contain_text("No points yet")


def test_the_chart_library_is_served_by_the_console_with_its_licence(gateway):
    page = httpx.get(f"{gateway.url}/console")
    assert '<script src="/console/uPlot.iife.min.js"></script>' in page.text
    script = httpx.get(f"{gateway.url}/console/uPlot.iife.min.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "script-src 'self'" in script.headers["content-security-policy"]
    assert httpx.get(f"{gateway.url}/console/uPlot.min.css").headers["content-type"].startswith("text/css")
    licence = httpx.get(f"{gateway.url}/console/uPlot.LICENSE.txt")
    assert licence.status_code == 200 and "MIT License" in licence.text and "Leon Sorokin" in licence.text
