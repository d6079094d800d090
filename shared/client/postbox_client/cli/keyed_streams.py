"""`postbox streams ...`, `postbox durable ...`, `postbox partitioned ...`, `postbox flows ...` and
`postbox tail` (follow a durable or keyed stream live)."""

from __future__ import annotations

import json
import sys

from ..errors import NotFound
from .output import bulk_report, emit_json, json_lines, progress, show, table
from .queues import BATCH, _json_arg


def s_list(args, pb) -> None:
    found = pb.streams.list()
    if args.json:
        return emit_json(found)
    table(({"name": s.name, "project": s.project, "messages": s.messages, "scheduled": s.scheduled,
            "active keys": s.active_keys, "subscriptions": ", ".join(s.subscriptions or [])} for s in found),
          ["name", "project", "messages", "scheduled", "active keys", "subscriptions"], title="streams")


def s_create(args, pb) -> None:
    show(pb.streams.create(args.name, retention=args.retention, max_backlog=args.max_backlog), args.json)


def s_publish(args, pb) -> int | None:
    if args.file:
        return _publish_file(args, pb)
    if args.payload is None:
        raise SystemExit("postbox streams publish: give a PAYLOAD or --file")
    message, replayed = pb.streams.publish(args.stream, _json_arg(args.payload), key=args.msg_key,
                                           idempotency_key=args.idempotency_key)
    show({"message": message, "replayed": replayed}, args.json)


def _publish_file(args, pb) -> int:
    """Bulk publish: one JSON object of a publish's fields per line (JSON lines), in batches of 100.
    A refused line is reported with its line number and why; the exit status is 1 if any was."""
    lines = json_lines(args.file, "streams publish")
    results = []
    with progress(f"publishing to {args.stream}", len(lines)) as advance:
        for i in range(0, len(lines), BATCH):
            chunk = [item for _, item in lines[i : i + BATCH]]
            results += pb.streams.publish_batch(args.stream, chunk)
            advance(len(chunk))
    answered = list(zip((n for n, _ in lines), results, strict=True))
    if args.json:
        emit_json([{"line": n, "ok": r.ok, "id": r.id, "offset": r.offset, "status": r.status,
                    "replayed": r.replayed, "error": r.error} for n, r in answered])
        return 1 if any(not r.ok for r in results) else 0
    return bulk_report([(n, r.ok, r.replayed, r.error) for n, r in answered])


def s_browse(args, pb) -> None:
    found, _ = pb.streams.browse(args.stream, key=args.msg_key, status=args.status, limit=args.limit)
    if args.json:
        return emit_json(found)
    table(({"offset": m.offset, "key": m.key, "status": m.status, "published": m.published_at,
            "payload": m.payload} for m in found), ["offset", "key", "status", "published", "payload"],
          title=f"messages of {args.stream}")


def s_subscriptions(args, pb) -> None:
    found = pb.streams.subscriptions(args.stream)
    if args.json:
        return emit_json(found)
    table(({"name": s.name, "pending": s.pending, "in flight": s.in_flight, "acked": s.acked, "dead": s.dead}
           for s in found), ["name", "pending", "in flight", "acked", "dead"], title=f"subscriptions of {args.stream}")


def d_create(args, pb) -> None:
    info = pb.durable.create(args.name, content_type=args.content_type)
    show({"name": info.name, "next_offset": info.next_offset}, args.json)


def d_append(args, pb) -> None:
    offset = pb.durable.append(args.name, _json_arg(args.data))
    show({"next_offset": offset}, args.json)


def d_read(args, pb) -> None:
    got = pb.durable.read(args.name, args.offset)
    show({"messages": got.messages, "next_offset": got.next_offset, "up_to_date": got.up_to_date,
          "closed": got.closed}, args.json)


def p_push(args, pb) -> None:
    from ..partitioned import item

    show(pb.partitioned.push([item(args.queue, _json_arg(args.payload), partition=args.partition,
                                   transaction_id=args.transaction_id)]), args.json)


def p_show(args, pb) -> None:
    resource = pb.partitioned.resource(args.queue)
    if args.json:
        return emit_json(resource)
    rows = [{"partition": p["name"], "next offset": p.get("nextOffset"), "group": g["name"],
             "committed": g.get("committedOffset"), "lag": g.get("lag"), "leased": g.get("leased")}
            for p in resource.get("partitions", []) for g in (p.get("consumerGroups") or [{"name": ""}])]
    table(rows, ["partition", "next offset", "group", "committed", "lag", "leased"], title=f"{args.queue}")
    show(resource.get("counters", {}), False)


def f_state(args, pb) -> None:
    rows = pb.flows.state(args.query_id, args.partition_id, key_prefix=args.prefix)
    if args.json:
        return emit_json(rows)
    table(({"key": r["key"].replace("\x1f", " | "), "value": r["value"], "updated": r.get("updated_at")}
           for r in rows), ["key", "value", "updated"], title="state")


def tail(args, pb) -> None:
    """Durable stream if one has that name, else keyed stream (or as --kind says)."""
    kind = args.kind
    if kind == "auto":
        try:
            pb.durable.head(args.name)
            kind = "durable"
        except NotFound:
            kind = "keyed"
    try:
        if kind == "durable":
            for message in pb.durable.tail(args.name, args.offset):
                _line(message, args.json)
        else:
            after = int(args.offset) if args.offset.isdigit() else None
            for m in pb.streams.tail(args.name, key=args.msg_key, after=after, from_start=args.offset == "-1",
                                     interval_s=args.interval):
                _line(m.raw if args.json else f"{m.offset}\t{m.key or ''}\t{json.dumps(m.payload)}", args.json)
    except KeyboardInterrupt:
        pass


def _line(value, as_json: bool) -> None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = json.dumps(value, default=str) if as_json or not isinstance(value, str) else value
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def register(sub, leaf) -> None:
    streams = sub.add_parser("streams", help="keyed streams: list, create, publish, browse, subscriptions")
    verbs = streams.add_subparsers(dest="verb", required=True, metavar="VERB")
    leaf(verbs, "list", s_list, "list streams with their counts and subscriptions")
    p = leaf(verbs, "create", s_create, "create a stream")
    p.add_argument("name", help="stream name")
    p.add_argument("--retention", default=None, help="e.g. 30d, 12h, forever (server default 7d)")
    p.add_argument("--max-backlog", type=int, default=None, help="publishes answer 429 past this backlog")
    p = leaf(verbs, "publish", s_publish, "publish a message, or many from a file of JSON lines")
    p.add_argument("stream", help="stream name")
    p.add_argument("payload", nargs="?", default=None, help="JSON payload (text otherwise)")
    p.add_argument("--file", default=None,
                   help="publish one message per line of this file ('-' = stdin), each a JSON object of a "
                        "publish's fields (payload, key, headers, idempotency_key, deliver_at, expires_at), "
                        "in batches of 100")
    p.add_argument("--msg-key", default=None, help="the message's ordering key")
    p.add_argument("--idempotency-key", default=None, help="publish at most once per key")
    p = leaf(verbs, "browse", s_browse, "messages newest first")
    p.add_argument("stream", help="stream name")
    p.add_argument("--msg-key", default=None, help="only messages with this key")
    p.add_argument("--status", default=None, choices=["scheduled", "available", "cancelled", "expired"],
                   help="only this status")
    p.add_argument("--limit", type=int, default=50, help="how many (≤ 500)")
    leaf(verbs, "subscriptions", s_subscriptions, "a stream's subscriptions and counters").add_argument(
        "stream", help="stream name")

    durable = sub.add_parser("durable", help="durable streams: create, append, read (tail with `postbox tail`)")
    verbs = durable.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = leaf(verbs, "create", d_create, "create a durable stream")
    p.add_argument("name", help="stream name")
    p.add_argument("--content-type", default="application/json", help="the stream's content type")
    p = leaf(verbs, "append", d_append, "append a message (a JSON array appends one per element)")
    p.add_argument("name", help="stream name")
    p.add_argument("data", help="JSON")
    p = leaf(verbs, "read", d_read, "read from an offset")
    p.add_argument("name", help="stream name")
    p.add_argument("--offset", default="-1", help="-1 = the start, now = the tail, or an offset")

    part = sub.add_parser("partitioned", help="partitioned queues: push, show partitions, groups and lag")
    verbs = part.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = leaf(verbs, "push", p_push, "push one message")
    p.add_argument("queue", help="queue name")
    p.add_argument("payload", help="JSON payload")
    p.add_argument("--partition", default=None, help="partition (server default: Default)")
    p.add_argument("--transaction-id", default=None, help="dedup id within the partition")
    leaf(verbs, "show", p_show, "partitions, consumer groups, lag and counters").add_argument("queue", help="queue")

    flows = sub.add_parser("flows", help="flows queries: read a query's state")
    verbs = flows.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = leaf(verbs, "state", f_state, "a query's state rows on one source partition")
    p.add_argument("query_id", help="the query_id registration answered")
    p.add_argument("partition_id", help="the source partitionId")
    p.add_argument("--prefix", default=None, help="only keys starting with this")

    p = leaf(sub, "tail", tail, "follow a durable or keyed stream live (Ctrl-C stops)")
    p.add_argument("name", help="stream name")
    p.add_argument("--kind", default="auto", choices=["auto", "durable", "keyed"],
                   help="auto: durable if such a stream exists, else keyed")
    p.add_argument("--offset", default="now",
                   help="-1 = from the start, now = only new messages, else a durable offset or a keyed stream's "
                        "offset to follow after")
    p.add_argument("--msg-key", default=None, help="keyed streams: only messages with this key")
    p.add_argument("--interval", type=float, default=1.0, help="keyed streams: seconds between polls")
