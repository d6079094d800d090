"""The console function over HTTP through the local gateway: its pages load without a key, with a
content security policy, and nothing outside the console folder is ever served."""

from __future__ import annotations

import httpx


def test_console_page_and_assets_are_served_without_a_key(gateway):
    page = httpx.get(f"{gateway.url}/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/console/app.js">' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    for asset, kind in (("app.js", "text/javascript"), ("lib.js", "text/javascript"), ("style.css", "text/css")):
        r = httpx.get(f"{gateway.url}/console/{asset}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), asset


def test_the_console_pages_fetch_nothing_from_elsewhere(gateway):
    for asset in ("index.html", "app.js", "lib.js", "queues.js", "partitioned.js", "streams.js", "flows.js",
                  "work.js", "charts.js", "style.css", "uPlot.min.css"):
        text = httpx.get(f"{gateway.url}/console/{asset}").text
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text, asset


def test_unknown_and_escaping_paths_are_404(gateway):
    for path in ("/console/nope.js", "/console/..%2Fapi%2Fconsole.py", "/console/.hidden.js", "/console/README"):
        assert httpx.get(f"{gateway.url}{path}").status_code == 404, path


def test_a_trailing_slash_opens_the_console_and_the_api_docs_as_without_one(gateway):
    """API Gateway routes `/console/` as `/console`; the local gateway does the same, and `/docs/`
    opens Swagger UI as `/docs` does."""
    plain = httpx.get(f"{gateway.url}/console")
    slashed = httpx.get(f"{gateway.url}/console/")
    assert slashed.status_code == 200 and slashed.text == plain.text
    assert slashed.headers["content-type"] == plain.headers["content-type"]
    for path in ("/docs", "/docs/"):
        docs = httpx.get(f"{gateway.url}{path}")
        assert docs.status_code == 200 and "swagger-ui" in docs.text, path
