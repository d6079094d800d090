"""Where the client finds the URL and the key: arguments, then the environment, then a config file.

    POSTBOX_URL, POSTBOX_KEY, POSTBOX_PROFILE     environment
    POSTBOX_URLS                                  each surface's own URL (JSON: {"queues": "https://..."},
                                                  as `pulumi stack output surface_urls --json` prints it)
    ~/.config/postbox/config.toml                 (or POSTBOX_CONFIG) one table per profile:

        [default]
        url = "https://abc123.execute-api.eu-west-1.amazonaws.com"
        key = "pbx_..."

        [default.urls]                            # a stack whose front door is function URLs
        queues = "https://abc.lambda-url.eu-west-1.on.aws"

A call goes to its surface's URL when one is given, else to the one URL.

Without a URL or a key anywhere, the `.postbox/dev-url` and `.postbox/dev-key` in the current directory
(what `make dev` writes: its URL, on whatever port it serves, and its key) are used, so the examples
run as they are against a local server.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"
DEV_KEY_FILE = Path(".postbox") / "dev-key"
DEV_URL_FILE = Path(".postbox") / "dev-url"


def config_path() -> Path:
    explicit = os.environ.get("POSTBOX_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "postbox" / "config.toml"


@dataclass(frozen=True)
class Target:
    url: str
    key: str | None
    urls: dict[str, str] = field(default_factory=dict)  # surface -> its own base URL


def _profile(name: str) -> dict[str, object]:
    path = config_path()
    if not path.is_file():
        return {}
    with path.open("rb") as f:
        data = tomllib.load(f)
    table = data.get(name, {})
    return {k: (v if isinstance(v, dict) else str(v)) for k, v in table.items()} if isinstance(table, dict) else {}


def _surface_urls(raw: object) -> dict[str, str]:
    if isinstance(raw, str):
        raw = json.loads(raw)
    if not isinstance(raw, dict):
        raise ValueError("surface URLs must map a surface's name to its URL")
    return {str(k): str(v).rstrip("/") for k, v in raw.items() if v}


def _dev_file(path: Path) -> str | None:
    """What `make dev` wrote to `path` (relative to the current directory), if anything."""
    return (path.read_text().strip() or None) if path.is_file() else None


def resolve(url: str | None = None, key: str | None = None, profile: str | None = None,
            urls: dict[str, str] | None = None) -> Target:
    """The URL(s) and key to use, the first found of: arguments, environment, config file, defaults."""
    table = _profile(profile or os.environ.get("POSTBOX_PROFILE") or "default")
    found_urls = _surface_urls(urls or os.environ.get("POSTBOX_URLS") or table.get("urls") or {})
    found_url = url or os.environ.get("POSTBOX_URL") or table.get("url") or _dev_file(DEV_URL_FILE) or DEFAULT_URL
    found_key = key or os.environ.get("POSTBOX_KEY") or table.get("key")
    found_key = found_key or _dev_file(DEV_KEY_FILE)
    return Target(str(found_url).rstrip("/"), str(found_key) if found_key else None, found_urls)
