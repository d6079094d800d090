"""`postbox queues ...` and `postbox dlq ...`."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ..queues import replay_plan
from .output import emit_json, progress, show, table, when

BATCH = 100


def _json_arg(text: str) -> Any:
    """A message from the command line: JSON if it parses, else the text as a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _settings(args) -> dict[str, Any]:
    out = {"visibility_timeout_sec": args.vt, "max_reads": args.max_reads, "dead_letter_queue": args.dlq,
           "retention_days": args.retention_days, "description": args.description}
    return {k: v for k, v in out.items() if v is not None}


def q_list(args, pb) -> None:
    queues = pb.queues.list()
    if args.json:
        return emit_json(queues)
    table(({"name": q.name, "depth": q.queue_length, "oldest (s)": q.oldest_age_sec, "sent": q.sent_total,
            "dead": q.dead_total, "dead-letter queue": q.dead_letter_queue} for q in queues),
          ["name", "depth", "oldest (s)", "sent", "dead", "dead-letter queue"], title="queues")


def q_create(args, pb) -> None:
    show(pb.queues.create(args.name, **_settings(args)), args.json)


def q_get(args, pb) -> None:
    show(pb.queues.get(args.name), args.json)


def q_delete(args, pb) -> None:
    show(pb.queues.delete(args.name), args.json)


def q_send(args, pb) -> None:
    if args.file:
        return _send_file(args, pb)
    if args.message is None:
        raise SystemExit("postbox queues send: give a MESSAGE or --file")
    msg_id = pb.queues.send(args.name, _json_arg(args.message), delay=args.delay)
    emit_json({"msg_id": msg_id}) if args.json else print(msg_id)


def _send_file(args, pb) -> None:
    """Bulk send: one message per line (NDJSON, or plain text lines), in batches of 100."""
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    ids: list[int] = []
    with progress(f"sending to {args.name}", len(lines)) as advance:
        for i in range(0, len(lines), BATCH):
            chunk = [_json_arg(line) for line in lines[i : i + BATCH]]
            ids += pb.queues.send_batch(args.name, chunk, delay=args.delay)
            advance(len(chunk))
    emit_json({"msg_ids": ids}) if args.json else print(f"sent {len(ids)} messages")


def _messages_table(messages, title: str) -> None:
    table(({"msg_id": m.msg_id, "read_ct": m.read_ct, "enqueued": when(m.enqueued_at), "message": m.message,
            "dead": m.dead_lettered or None} for m in messages),
          ["msg_id", "read_ct", "enqueued", "message", "dead"], title=title)


def q_read(args, pb) -> None:
    found = pb.queues.read(args.name, args.qty, vt=args.vt, wait_seconds=args.wait)
    if args.archive and found:
        pb.queues.archive(args.name, [m.msg_id for m in found])
    emit_json(found) if args.json else _messages_table(found, "messages")


def q_archive(args, pb) -> None:
    show({"archived": pb.queues.archive(args.name, args.msg_ids)}, args.json)


def q_purge(args, pb) -> None:
    with progress(f"purging {args.name}", None) as advance:
        purged = pb.queues.purge(args.name, include_archived=args.archived)
        advance(purged)
    emit_json({"purged": purged}) if args.json else print(f"purged {purged} messages")


def q_browse(args, pb) -> None:
    page = pb.queues.browse(args.name, args.state, limit=args.limit)
    emit_json(page.messages) if args.json else _messages_table(page.messages, f"{args.state} messages")


def q_export(args, pb) -> None:
    """Every message in a state to NDJSON (a file or stdout), with a progress bar."""
    total = pb.queues.get(args.name).queue_length if args.state == "waiting" else None
    with contextlib.ExitStack() as stack:
        target = sys.stdout if args.out == "-" else stack.enter_context(Path(args.out).open("w"))
        count = 0
        with progress(f"exporting {args.name}", total) as advance:
            for m in pb.queues.iter_messages(args.name, args.state):
                target.write(json.dumps(m.raw, default=str) + "\n")
                count += 1
                advance(1)
    if args.out != "-":
        print(f"exported {count} messages to {args.out}", file=sys.stderr)


def dlq_list(args, pb) -> None:
    if args.partitioned:
        return show(pb.partitioned.dead_letters(args.queue, limit=args.limit), args.json)
    dead = pb.queues.dead_letters(args.queue, limit=args.limit)
    emit_json(dead) if args.json else _messages_table(dead, f"dead letters of {args.queue}")


def dlq_replay(args, pb) -> None:
    if args.partitioned:
        ids = args.ids or [str(m["id"]) for m in pb.partitioned.dead_letters(args.queue, limit=args.limit)["messages"]]
        with progress(f"replaying {args.queue}", len(ids)) as advance:
            replayed = 0
            for i in range(0, len(ids), BATCH):
                replayed += pb.partitioned.replay(ids[i : i + BATCH]).get("replayed", 0)
                advance(len(ids[i : i + BATCH]))
        return emit_json({"replayed": replayed}) if args.json else print(f"replayed {replayed} dead letters")
    where, state = replay_plan(pb.queues.get(args.queue))
    total = len(pb.queues.dead_letters(args.queue, limit=args.limit)) if not args.ids else len(args.ids)
    with progress(f"replaying {where} into {args.queue}", total) as advance:
        new_ids = pb.queues.replay_dead(args.queue, [int(i) for i in args.ids] if args.ids else None,
                                        limit=args.limit, progress=advance)
    emit_json({"replayed": len(new_ids), "msg_ids": new_ids}) if args.json else print(
        f"replayed {len(new_ids)} dead letters into {args.queue}")


def register(sub, leaf) -> None:
    queues = sub.add_parser("queues", help="pgmq-style queues: list, create, send, read, purge, browse, export")
    verbs = queues.add_subparsers(dest="verb", required=True, metavar="VERB")
    leaf(verbs, "list", q_list, "list queues with depth, oldest message age and dead letters")
    p = leaf(verbs, "create", q_create, "create a queue")
    p.add_argument("name", help="queue name")
    p.add_argument("--vt", type=int, default=None, help="default visibility timeout in seconds (server: 30)")
    p.add_argument("--max-reads", type=int, default=None, help="reads before a message is dead (server: never)")
    p.add_argument("--dlq", default=None, help="dead-letter queue name (must exist)")
    p.add_argument("--retention-days", type=int, default=None, help="keep archived messages this long (plan's)")
    p.add_argument("--description", default=None, help="free text")
    leaf(verbs, "get", q_get, "a queue's settings and metrics").add_argument("name", help="queue name")
    leaf(verbs, "delete", q_delete, "delete a queue and its messages").add_argument("name", help="queue name")
    p = leaf(verbs, "send", q_send, "send a message (JSON or text), or many from a file")
    p.add_argument("name", help="queue name")
    p.add_argument("message", nargs="?", default=None, help="the message: JSON, else sent as a string")
    p.add_argument("--file", default=None, help="send one message per line of this file ('-' = stdin)")
    p.add_argument("--delay", type=float, default=0, help="seconds before the message is visible")
    p = leaf(verbs, "read", q_read, "read (claim) messages")
    p.add_argument("name", help="queue name")
    p.add_argument("--qty", type=int, default=1, help="how many messages (1-100)")
    p.add_argument("--vt", type=float, default=None, help="hide them this many seconds (queue's default)")
    p.add_argument("--wait", type=float, default=0, help="long-poll up to this many seconds (0-20)")
    p.add_argument("--archive", action="store_true", help="archive what was read at once")
    p = leaf(verbs, "archive", q_archive, "archive messages by id")
    p.add_argument("name", help="queue name")
    p.add_argument("msg_ids", nargs="+", type=int, help="message ids")
    p = leaf(verbs, "purge", q_purge, "delete every waiting message")
    p.add_argument("name", help="queue name")
    p.add_argument("--archived", action="store_true", help="also empty the archive")
    p = leaf(verbs, "browse", q_browse, "look at messages newest first without claiming them")
    p.add_argument("name", help="queue name")
    p.add_argument("--state", default="waiting", choices=["waiting", "archived", "dead"], help="which messages")
    p.add_argument("--limit", type=int, default=50, help="how many (≤ 200)")
    p = leaf(verbs, "export", q_export, "write every message in a state as NDJSON")
    p.add_argument("name", help="queue name")
    p.add_argument("--state", default="waiting", choices=["waiting", "archived", "dead"], help="which messages")
    p.add_argument("--out", default="-", help="file to write ('-' = stdout)")

    dlq = sub.add_parser("dlq", help="dead letters of a queue (or a partitioned queue): list and replay")
    verbs = dlq.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, fn, text in (("list", dlq_list, "list a queue's dead letters"),
                           ("replay", dlq_replay, "send dead letters back to their queue")):
        p = leaf(verbs, name, fn, text)
        p.add_argument("queue", help="the queue whose dead letters these are (not the dead-letter queue)")
        p.add_argument("--partitioned", action="store_true", help="a partitioned queue (/api/v1/dlq)")
        p.add_argument("--limit", type=int, default=1000, help="at most this many")
        if name == "replay":
            p.add_argument("--ids", nargs="*", default=None, help="only these dead letters (default: all)")
