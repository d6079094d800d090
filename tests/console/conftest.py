"""A headless Chromium for the console tests: Debian's `chromium` package (`make test` installs it),
driven by Playwright without any browser download of its own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("POSTBOX_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium package (needs apt)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 760}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    context.close()
    assert errors == [], f"the console raised in the browser: {errors}"


@pytest.fixture
def screenshot(tmp_path_factory):
    """Save a screenshot of the page: into docs/screenshots/ (the README shows them) when
    POSTBOX_SCREENSHOTS=1, else into a temporary folder, so a test run leaves the tree clean."""
    folder = SCREENSHOTS if os.environ.get("POSTBOX_SCREENSHOTS") == "1" else tmp_path_factory.mktemp("screens")
    folder.mkdir(parents=True, exist_ok=True)

    def take(page, name: str, *, full_page: bool = True) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        assert path.stat().st_size > 5_000  # a real page, not a blank one
        return path

    return take
