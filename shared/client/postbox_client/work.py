"""Work queues (`/v1/modules/scaiqueue`): scopes, queues, messages, claims and subscriptions.

Answers are the API's documents as dicts (the `data` of its envelope). A claimed message carries
its `claim_token`; `complete`, `fail`, `release` and `extend` take the message dict and send the
token back, so a consumer whose claim ran out cannot finish another consumer's claim. Finishing
calls are not retried once they may have landed (a second `complete` would answer NOT_CLAIMED). `consume`
runs a handler on every message with a heartbeat (`extend`), completing it with the handler's
return value as the response, failing it with the exception's text.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from .heartbeat import abeating, beating, run_handler
from .transport import Call

BASE = "/v1/modules/scaiqueue"
log = logging.getLogger("postbox_client")
Message = dict[str, Any]


def _data(response: Any) -> Any:
    return response.json()["data"]


def _page(response: Any) -> tuple[list[dict[str, Any]], str | None]:
    body = response.json()
    return body["data"], (body.get("meta") or {}).get("next_cursor")


def _id(value: str | dict[str, Any]) -> str:
    return quote(str(value["id"] if isinstance(value, dict) else value), safe="")


def _token(message: str | Message, fields: dict[str, Any]) -> dict[str, Any]:
    if isinstance(message, dict) and message.get("claim_token") and "claim_token" not in fields:
        return {**fields, "claim_token": message["claim_token"]}
    return fields


def _held_by(message: str | Message, fields: dict[str, Any]) -> dict[str, Any]:
    """A message a subscription claimed (it carries `subscription_id`) ends that subscription's delivery."""
    if isinstance(message, dict) and message.get("subscription_id") and "subscription_id" not in fields:
        return {**fields, "subscription_id": message["subscription_id"]}
    return fields


class WorkCalls:
    """The routes, one method each. Scopes, queues and messages may be given as ids or as the dicts
    the API answered."""

    def __init__(self, transport: Any) -> None:
        self._t = transport

    # ---- scopes and queues ----------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any] | None = None, parse: Callable[[Any], Any] = _data) -> Any:
        return self._t.run(Call("GET", BASE + path, params=params, idempotent=True, parse=parse))

    def _post(self, path: str, body: Any = None, *, idempotent: bool = False) -> Any:
        return self._t.run(Call("POST", BASE + path, json=body, idempotent=idempotent, parse=_data))

    def create_scope(self, slug: str, **fields: Any) -> dict[str, Any]:
        """A scope (display_name, description, defaults); its five system queues come with it."""
        return self._post("/scopes", {"slug": slug, **fields})

    def scopes(self, *, limit: int = 50, cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        return self._get("/scopes", {"limit": limit, "cursor": cursor}, _page)

    def scope(self, scope: str | dict) -> dict[str, Any]:
        return self._get(f"/scopes/{_id(scope)}")

    def scope_transition(self, scope: str | dict, action: str) -> dict[str, Any]:
        """pause, resume, drain, archive or unarchive."""
        return self._post(f"/scopes/{_id(scope)}/{quote(action, safe='')}", idempotent=True)

    def delete_scope(self, scope: str | dict) -> Any:
        return self._t.run(Call("DELETE", f"{BASE}/scopes/{_id(scope)}", idempotent=True, parse=_data))

    def create_queue(self, scope: str | dict, slug: str, **fields: Any) -> dict[str, Any]:
        """A queue (consumer_mode, ordering, max_depth, overflow_policy, ...)."""
        return self._post(f"/scopes/{_id(scope)}/queues", {"slug": slug, **fields})

    def queues(self, scope: str | dict, *, limit: int = 50,
               cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        return self._get(f"/scopes/{_id(scope)}/queues", {"limit": limit, "cursor": cursor}, _page)

    def queue(self, scope: str | dict, queue: str | dict) -> dict[str, Any]:
        return self._get(f"/scopes/{_id(scope)}/queues/{_id(queue)}")

    def stats(self, scope: str | dict, queue: str | dict) -> dict[str, Any]:
        return self._get(f"/scopes/{_id(scope)}/queues/{_id(queue)}/stats")

    def history(self, scope: str | dict, queue: str | dict, window: str = "hour") -> dict[str, Any]:
        """Depth, oldest age and messages in and out per minute, a point a minute over the last `window`
        ("hour" or "day"), as columns (`t`, `depth`, ...); recorded once a minute."""
        return self._get(f"/scopes/{_id(scope)}/queues/{_id(queue)}/history", {"window": window})

    # ---- messages -------------------------------------------------------------------------------

    def publish(self, scope: str | dict, queue: str | dict, body: Any, **fields: Any) -> Message:
        """Publish one message (type, priority, labels, correlation_id, ttl_seconds, ...). With an
        `idempotency_key` it is retried safely: a replay answers the original message."""
        return self._t.run(Call("POST", f"{BASE}/scopes/{_id(scope)}/queues/{_id(queue)}/messages",
                                json={"body": body, **fields}, idempotent=bool(fields.get("idempotency_key")),
                                parse=_data))

    def publish_batch(self, scope: str | dict, queue: str | dict, messages: list[dict[str, Any]], *,
                      atomic: bool = False) -> list[dict[str, Any]]:
        """Publish up to 100 messages in one request, each a dict of a publish's fields (`body`, and
        `type`, `priority`, `labels`, `idempotency_key`, ...). One answer per message, in order:
        `{ok: true, status, id, queue_id, state, replayed}`, or `{ok: false, status, error}` for one
        refused as a single publish would refuse it, which does not stop the others. With `atomic`,
        all are published or none (a refused one raises its error). Retried like a read only when
        every message carries an idempotency_key."""
        body = {"messages": list(messages), "atomic": atomic}
        return self._t.run(Call("POST", f"{BASE}/scopes/{_id(scope)}/queues/{_id(queue)}/messages/batch",
                                json=body, parse=_data,
                                idempotent=bool(messages) and all(isinstance(m, dict) and m.get("idempotency_key")
                                                                  for m in messages)))

    def claim(self, scope: str | dict, queue: str | dict, batch_size: int = 1,
              visibility_timeout_s: int | None = None, *, subscription: str | dict | None = None) -> list[Message]:
        """Up to batch_size messages; naming a `subscription` makes it that subscription's claim."""
        body: dict[str, Any] = {"batch_size": batch_size}
        if visibility_timeout_s is not None:
            body["visibility_timeout_s"] = visibility_timeout_s
        if subscription is not None:
            body["subscription_id"] = _id(subscription)
        return self._post(f"/scopes/{_id(scope)}/queues/{_id(queue)}/messages/claim", body)

    def _finish(self, scope: str | dict, message: str | Message, action: str, fields: dict[str, Any]) -> Message:
        return self._post(f"/scopes/{_id(scope)}/messages/{_id(message)}/{action}", _token(message, fields),
                          idempotent=action == "extend")

    def complete(self, scope: str | dict, message: str | Message, response: dict[str, Any] | None = None) -> Message:
        return self._finish(scope, message, "complete", _held_by(message, {"response": response}))

    def fail(self, scope: str | dict, message: str | Message, reason: str = "") -> Message:
        """Back to pending after the backoff, or to the dead letter after the last attempt."""
        return self._finish(scope, message, "fail", _held_by(message, {"reason": reason}))

    def release(self, scope: str | dict, message: str | Message) -> Message:
        return self._finish(scope, message, "release", _held_by(message, {}))

    def extend(self, scope: str | dict, message: str | Message, seconds: int) -> Message:
        return self._finish(scope, message, "extend", {"seconds": seconds})

    def cancel(self, scope: str | dict, message: str | Message) -> Message:
        return self._post(f"/scopes/{_id(scope)}/messages/{_id(message)}/cancel")

    def finish_batch(self, scope: str | dict, action: str, items: list[Message | dict[str, Any]]) -> list[dict]:
        """complete, fail or release up to 100 claimed messages in one call: each item a claimed
        message (its id and token are sent) or an `{id, claim_token, response | reason}` dict."""
        body = [{k: item[k] for k in ("id", "claim_token", "response", "reason") if item.get(k) is not None}
                for item in items]
        return self._post(f"/scopes/{_id(scope)}/messages/{quote(action, safe='')}-batch", {"items": body})

    def messages(self, scope: str | dict, queue: str | dict, state: str | None = "pending", *, limit: int = 50,
                 cursor: str | None = None) -> tuple[list[Message], str | None]:
        """A page of the queue's messages in one state, or in every state (None), oldest first."""
        return self._get(f"/scopes/{_id(scope)}/queues/{_id(queue)}/messages",
                         {"state": state, "limit": limit, "cursor": cursor}, _page)

    def message(self, scope: str | dict, queue: str | dict, message: str | Message) -> Message:
        return self._get(f"/scopes/{_id(scope)}/queues/{_id(queue)}/messages/{_id(message)}")

    def chain(self, scope: str | dict, correlation_id: str) -> list[Message]:
        """Every message of the scope with this correlation id, oldest first."""
        return self._get(f"/scopes/{_id(scope)}/messages", {"correlation_id": correlation_id})

    # ---- subscriptions and agents ---------------------------------------------------------------

    def subscribe(self, scope: str | dict, queue: str | dict, subscriber_id: str, *,
                  subscriber_type: str = "agent", **fields: Any) -> dict[str, Any]:
        """A subscription on a queue of either mode (filter, delivery_mode, push_url, auto_claim, max_in_flight)."""
        return self._post(f"/scopes/{_id(scope)}/subscriptions",
                          {"subscriber_type": subscriber_type, "subscriber_id": subscriber_id,
                           "queue_id": str(queue["id"] if isinstance(queue, dict) else queue), **fields})

    def deliveries(self, scope: str | dict, subscription: str | dict, state: str = "claimed", *,
                   limit: int = 50, cursor: str | None = None) -> tuple[list[Message], str | None]:
        """A subscription's deliveries in one state (its inbox when auto-claimed), with claim tokens."""
        return self._get(f"/scopes/{_id(scope)}/subscriptions/{_id(subscription)}/deliveries",
                         {"state": state, "limit": limit, "cursor": cursor}, _page)

    def system_agents(self) -> list[dict[str, Any]]:
        return self._get("/system-agents")


def _response(result: Any) -> dict[str, Any] | None:
    """What a handler returned, as a completion's response (a dict, or wrapped as `{"result": …}`)."""
    if result is None or isinstance(result, dict):
        return result
    return {"result": result}


class Work(WorkCalls):
    """Sync work-queue client."""

    def iter_messages(self, scope: str | dict, queue: str | dict, state: str | None = "pending", *,
                      page: int = 200) -> Iterator[Message]:
        cursor = None
        while True:
            found, cursor = self.messages(scope, queue, state, limit=page, cursor=cursor)
            yield from found
            if cursor is None:
                return

    def consume(self, scope: str | dict, queue: str | dict, handler: Callable[[Message], Any], *,
                batch_size: int = 10, visibility_timeout_s: int = 30, idle_s: float = 1.0,
                stop: threading.Event | None = None, max_messages: int | None = None,
                until_empty: bool = False) -> int:
        """Claim and handle messages until `stop` is set, `max_messages` are completed, or (with
        `until_empty`) a claim finds nothing; between empty claims wait `idle_s`. Returns how many
        the handler completed."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (max_messages is None or done < max_messages):
            want = batch_size if max_messages is None else min(batch_size, max_messages - done)
            found = self.claim(scope, queue, want, visibility_timeout_s)
            if not found:
                if until_empty:
                    break
                stop.wait(idle_s)
                continue
            done += sum(self._handle(scope, m, handler, visibility_timeout_s) for m in found)
        return done

    def _handle(self, scope: str | dict, message: Message, handler: Callable[[Message], Any], vt: int) -> bool:
        try:
            with beating(lambda: self.extend(scope, message, vt), vt / 2, f"message {message['id']}"):
                result = handler(message)
        except Exception as error:
            log.exception("handler failed on message %s", message["id"])
            self.fail(scope, message, f"{type(error).__name__}: {error}"[:2000])
            return False
        self.complete(scope, message, _response(result))
        return True


class AsyncWork(WorkCalls):
    """Async work-queue client: every call is awaited; handlers may be sync or async."""

    async def consume(self, scope: str | dict, queue: str | dict, handler: Callable[[Message], Any], *,
                      batch_size: int = 10, visibility_timeout_s: int = 30, idle_s: float = 1.0,
                      max_messages: int | None = None, until_empty: bool = False) -> int:
        done = 0
        while max_messages is None or done < max_messages:
            want = batch_size if max_messages is None else min(batch_size, max_messages - done)
            found = await self.claim(scope, queue, want, visibility_timeout_s)
            if not found:
                if until_empty:
                    break
                await asyncio.sleep(idle_s)
                continue
            for message in found:
                done += await self._handle(scope, message, handler, visibility_timeout_s)
        return done

    async def _handle(self, scope: str | dict, message: Message, handler: Callable[[Message], Any], vt: int) -> bool:
        try:
            async with abeating(lambda: self.extend(scope, message, vt), vt / 2, f"message {message['id']}"):
                result = await run_handler(handler, message)
        except Exception as error:
            log.exception("handler failed on message %s", message["id"])
            await self.fail(scope, message, f"{type(error).__name__}: {error}"[:2000])
            return False
        await self.complete(scope, message, _response(result))
        return True
