"""`postbox work ...`: work queues — scopes, queues and their depths, publish, claim, complete and
fail, messages by state, and the system agents."""

from __future__ import annotations

import uuid

from ..errors import NotFound
from .output import bulk_report, emit_json, json_lines, progress, show, table
from .queues import BATCH, _json_arg


def _is_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _by_slug(pages, value: str, what: str, code: str, where: str = "") -> str:
    """The id of the item with this slug, looked for page by page (`pages(cursor)` answers one), or
    `value` itself when it is an id already."""
    if _is_id(value):
        return value
    cursor = None
    while True:
        found, cursor = pages(cursor)
        for item in found:
            if item["slug"] == value:
                return item["id"]
        if cursor is None:
            raise NotFound(f"no {what} with slug {value!r}{where}", status=404, code=code)


def _where(args, pb) -> None:
    """Scope (and queue) arguments may be slugs: turn them into ids once."""
    if getattr(args, "scope", None):
        args.scope = _by_slug(lambda c: pb.work.scopes(limit=200, cursor=c), args.scope, "scope",
                              "SCAIQUEUE_SCOPE_NOT_FOUND")
        if getattr(args, "queue", None):
            args.queue = _by_slug(lambda c: pb.work.queues(args.scope, limit=200, cursor=c), args.queue,
                                  "queue", "SCAIQUEUE_QUEUE_NOT_FOUND", " in this scope")


def scopes(args, pb) -> None:
    found, _ = pb.work.scopes(limit=200)
    if args.json:
        return emit_json(found)
    table(({"slug": s["slug"], "state": s["state"], "created": s.get("created_at"), "id": s["id"]} for s in found),
          ["slug", "state", "created", "id"], title="scopes (other verbs take the slug or the id)")


def create_scope(args, pb) -> None:
    show(pb.work.create_scope(args.slug), args.json)


def queues(args, pb) -> None:
    _where(args, pb)
    found, _ = pb.work.queues(args.scope, limit=200)
    if args.json:
        return emit_json(found)
    rows = []
    for q in found:
        depth = pb.work.stats(args.scope, q["id"])
        rows.append({"id": q["id"], "slug": q["slug"], "ordering": q["ordering"], "mode": q["consumer_mode"],
                     "state": q["state"], "pending": depth["depth_pending"], "claimed": depth["depth_claimed"]})
    table(rows, ["id", "slug", "ordering", "mode", "state", "pending", "claimed"], title="queues")


def create_queue(args, pb) -> None:
    _where(args, pb)
    show(pb.work.create_queue(args.scope, args.slug, ordering=args.ordering, consumer_mode=args.consumer_mode),
         args.json)


def publish(args, pb) -> int | None:
    _where(args, pb)
    if args.file is not None:
        return _publish_file(args, pb)
    if args.body is None:
        raise SystemExit("postbox work publish: give a BODY or --file")
    fields = {"type": args.type, "idempotency_key": args.idempotency_key, "correlation_id": args.correlation_id}
    message = pb.work.publish(args.scope, args.queue, _json_arg(args.body),
                              **{k: v for k, v in fields.items() if v is not None})
    emit_json(message) if args.json else print(message["id"])
    return None


def _publish_file(args, pb) -> int:
    """Bulk publish: one JSON object of a publish's fields per line (JSON lines), in batches of 100
    (the batch publish). A refused line is reported with its line number and why; the exit status
    is 1 if any was."""
    lines = json_lines(args.file, "work publish")
    results: list[dict] = []
    with progress("publishing", len(lines)) as advance:
        for i in range(0, len(lines), BATCH):
            chunk = [item for _, item in lines[i : i + BATCH]]
            results += pb.work.publish_batch(args.scope, args.queue, chunk)
            advance(len(chunk))
    answered = list(zip((n for n, _ in lines), results, strict=True))
    if args.json:
        emit_json([{"line": n, **r} for n, r in answered])
        return 1 if any(not r["ok"] for r in results) else 0
    return bulk_report([(n, r["ok"], r.get("replayed", False), r.get("error")) for n, r in answered])


def claim(args, pb) -> None:
    _where(args, pb)
    show(pb.work.claim(args.scope, args.queue, args.batch_size, args.visibility_timeout), args.json)


def finish(args, pb) -> None:
    _where(args, pb)
    message = {"id": args.message, "claim_token": args.claim_token}
    if args.verb == "complete":
        show(pb.work.complete(args.scope, message, _json_arg(args.response) if args.response else None), args.json)
    else:
        show(pb.work.fail(args.scope, message, args.reason), args.json)


def messages(args, pb) -> None:
    _where(args, pb)
    found, _ = pb.work.messages(args.scope, args.queue, args.state, limit=args.limit)
    if args.json:
        return emit_json(found)
    table(({"id": m["id"], "type": m["type"], "attempts": m["attempts"], "created": m["created_at"],
            "body": m["body"]} for m in found), ["id", "type", "attempts", "created", "body"],
          title=f"{args.state} messages")


def agents(args, pb) -> None:
    found = pb.work.system_agents()
    if args.json:
        return emit_json(found)
    table(({"agent": a["name"], "status": a["status"], "runs": a["total_runs"], "processed": a["total_processed"],
            "errors": a["total_errors"], "last run": a["last_run_at"]} for a in found),
          ["agent", "status", "runs", "processed", "errors", "last run"], title="system agents")


def register(sub, leaf) -> None:
    work = sub.add_parser("work", help="work queues: scopes, queues, publish, claim, complete, fail, agents")
    verbs = work.add_subparsers(dest="verb", required=True, metavar="VERB")
    leaf(verbs, "scopes", scopes, "list scopes")
    leaf(verbs, "create-scope", create_scope, "create a scope (with its system queues)").add_argument(
        "slug", help="the scope's slug, unique in the tenant")
    leaf(verbs, "queues", queues, "a scope's queues with their depths").add_argument("scope", help="scope id or slug")
    p = leaf(verbs, "create-queue", create_queue, "create a queue in a scope")
    p.add_argument("scope", help="scope id or slug")
    p.add_argument("slug", help="the queue's slug, unique in the scope")
    p.add_argument("--ordering", default="fifo", choices=["fifo", "priority", "deadline"], help="claim order")
    p.add_argument("--consumer-mode", default="competing", choices=["competing", "broadcast"],
                   help="one consumer per message, or every subscription")
    p = leaf(verbs, "publish", publish, "publish one message (prints its id), or many from a file of JSON lines")
    p.add_argument("scope", help="scope id or slug")
    p.add_argument("queue", help="queue id or slug")
    p.add_argument("body", nargs="?", default=None, help="JSON object, else the text as a string")
    p.add_argument("--file", default=None,
                   help="publish one message per line of this file ('-' = stdin), each a JSON object of a "
                        "publish's fields (body, type, priority, labels, idempotency_key, ...), in batches of 100")
    p.add_argument("--type", default=None, help="message type (server default: task)")
    p.add_argument("--idempotency-key", default=None, help="publish at most once per key")
    p.add_argument("--correlation-id", default=None, help="ties the message to its chain and events")
    p = leaf(verbs, "claim", claim, "claim messages in the queue's order (prints them with claim tokens)")
    p.add_argument("scope", help="scope id or slug")
    p.add_argument("queue", help="queue id or slug")
    p.add_argument("--batch-size", type=int, default=1, help="how many (≤ 100)")
    p.add_argument("--visibility-timeout", type=int, default=None, help="seconds (default: the message's)")
    for verb, text in (("complete", "complete a claimed message"), ("fail", "fail a claimed message")):
        p = leaf(verbs, verb, finish, text)
        p.add_argument("scope", help="scope id or slug")
        p.add_argument("message", help="message id")
        p.add_argument("--claim-token", default=None, help="the token the claim answered")
        if verb == "complete":
            p.add_argument("--response", default=None, help="JSON object stored as the response")
        else:
            p.add_argument("--reason", default="", help="why it failed")
    p = leaf(verbs, "messages", messages, "a queue's messages in one state, oldest first")
    p.add_argument("scope", help="scope id or slug")
    p.add_argument("queue", help="queue id or slug")
    p.add_argument("--state", default="pending", help="pending, claimed, completed, dead_lettered, ...")
    p.add_argument("--limit", type=int, default=50, help="how many (≤ 200)")
    leaf(verbs, "agents", agents, "the system agents' runs, processed counts and errors")
