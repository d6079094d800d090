"""The `postbox` client verbs: queues, dead letters, keyed streams, durable streams, partitioned queues,
flows, work queues, and `tail`. URL and key come from --url/--key, else POSTBOX_URL/POSTBOX_KEY, else the config
file (`postbox login` writes it), else `make dev`'s `.postbox/dev-url` and `.postbox/dev-key`.
`--json` prints JSON for scripts; tables otherwise."""

from __future__ import annotations

import argparse
import json
import sys

from ..client import Client
from ..config import config_path, resolve
from ..errors import PostboxError
from . import keyed_streams, queues, work

VERBS = ("queues", "dlq", "streams", "durable", "partitioned", "flows", "work", "tail", "login")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the empty ones (None, False) that say nothing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS \
                or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection and output")
    g.add_argument("--url", default=None, help="Postbox URL (else $POSTBOX_URL, the config file, .postbox/dev-url,"
                                                    " http://127.0.0.1:8080)")
    g.add_argument("--key", default=None, help="API key (else $POSTBOX_KEY, the config file, .postbox/dev-key)")
    g.add_argument("--profile", default=None, help="config file profile (else $POSTBOX_PROFILE, 'default')")
    g.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of tables")
    return p


COMMON = _common()


def leaf(verbs, name: str, fn, text: str) -> argparse.ArgumentParser:
    p = verbs.add_parser(name, help=text, description=text, parents=[COMMON], formatter_class=_Help)
    p.set_defaults(run=fn)
    return p


def login(args, _pb) -> None:
    """Save URL, key and each surface's URL (`--urls`, or what the environment gives) in the config
    file's profile (the file is made readable by you only)."""
    try:
        target = resolve(args.url, args.key, args.profile, urls=args.urls)
    except ValueError as bad:  # --urls that is not a JSON object of surface names to URLs
        raise SystemExit(f"postbox login: --urls: {bad}") from None
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    profile = args.profile or "default"
    kept = _other_profiles(path.read_text() if path.is_file() else "", profile)
    block = f"[{profile}]\nurl = {_toml(target.url)}\nkey = {_toml(args.key or '')}\n"
    if target.urls:
        block += f"\n[{profile}.urls]\n" + "".join(f"{_toml(k)} = {_toml(v)}\n" for k, v in sorted(target.urls.items()))
    path.write_text(kept + block)
    path.chmod(0o600)
    print(f"saved profile {profile!r} in {path}")


def _toml(text: str) -> str:
    """A TOML basic string (a JSON string is one, escapes included)."""
    return json.dumps(text)


def _other_profiles(text: str, profile: str) -> str:
    """The config file without the tables of `profile` (its own and its `urls`)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.strip().startswith("["):
            skipping = line.strip() in (f"[{profile}]", f"[{profile}.urls]")
        if not skipping:
            out.append(line)
    return "".join(out)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="postbox", description=__doc__, formatter_class=_Help)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    queues.register(sub, leaf)
    keyed_streams.register(sub, leaf)
    work.register(sub, leaf)
    saved = leaf(sub, "login", login, "save --url, --key and --urls in the config file (profile from --profile)")
    saved.add_argument("--urls", default=None, help="each surface's URL, as JSON (a function-URL stack's"
                   " `pulumi stack output surface_urls --json`); else $POSTBOX_URLS")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.run is login:
        login(args, None)
        return 0
    try:
        with Client(args.url, args.key, profile=args.profile) as pb:
            status = args.run(args, pb)  # a verb may answer its exit status (a bulk publish with refusals: 1)
    except PostboxError as error:
        print(f"postbox: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
