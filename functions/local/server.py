"""The local gateway's HTTP server: a thread per connection, which parses its own requests
(httptools, the C parser uvicorn uses) and calls the gateway itself.

uvicorn ran each request through an event loop and handed it to a worker thread and back: about
0.2 ms of CPU per request before any work, and two thread handoffs, each a wait for the GIL and a
core. Here a request costs about half that CPU and no handoff; a long poll holds only its own
connection's thread.

What a client meets is plain HTTP/1.1: keep-alive (a connection idle for KEEP_ALIVE_S is closed),
chunked request bodies, `Expect: 100-continue`, HEAD (the headers only), pipelined requests
answered in order, a body over the gateway's limit answered 413 (with `Expect`, before the body is
sent, and the connection closed), a request whose line and headers run past MAX_HEAD_BYTES
answered 431 and closed (the rest unread), and a request that is not HTTP answered 400 and closed
(a folded header line, obs-fold, among them: RFC 9112 lets a server refuse it, and the parser
does). Every answer has a Content-Length but an SSE one (`text/event-stream`), which EventSource
clients and the Durable Streams protocol expect as a stream: it goes out chunked, or, to an HTTP/1.0
client, delimited by closing the connection. A streamed answer (`functions.streaming`: an open SSE
read) is written chunk by chunk as its function produces it, on its connection's thread.

A connection's thread is all a waiting request holds (`postbox.wakeup`: no database connection), so
the server holds as many long polls as the process has threads and descriptors for (500 are tested).

`postbox dev --workers N` binds the port once and runs N worker processes on it (`serve_workers`);
each accepts its own connections, and one that dies is started again.
"""

from __future__ import annotations

import contextlib
import http
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from email.utils import formatdate
from typing import Protocol
from urllib.parse import unquote

import httptools

from functions.local.events import HttpResponse, json_message
from functions.streaming import StreamedBody

KEEP_ALIVE_S = 5.0
"""How long a connection may sit idle between requests."""
READ_TIMEOUT_S = 60.0
"""How long a request that has begun may take to arrive in full."""
MAX_HEAD_BYTES = 16 * 1024
"""The most a request's line and headers may take together."""
_BAD_REQUEST = json_message(400, "Bad Request")
_HEAD_TOO_LARGE = json_message(431, "Request Header Fields Too Large")
_FAILED = json_message(500, "Internal Server Error")
_NO_BODY = {204, 304}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}
_REASONS = {s.value: s.phrase for s in http.HTTPStatus}

logger = logging.getLogger("postbox.gateway")


class Gateway(Protocol):
    """What the server serves: `LocalGateway`, or anything answering the same two calls."""

    max_body_bytes: int

    def handle(self, method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes,
               source_ip: str = "127.0.0.1") -> HttpResponse: ...

    def too_large(self, method: str, path: str) -> HttpResponse: ...


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


class Server:
    """Serves `gateway` on a listening socket until `shutdown()` (or the process ends)."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *,
                 sock: socket.socket | None = None) -> None:
        self.gateway = gateway
        self.sock = sock if sock is not None else bind(host, port)
        self._closing = threading.Event()
        self._date = (0, "")

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def serve_forever(self) -> None:
        while not self._closing.is_set():
            try:
                conn, address = self.sock.accept()
            except OSError:
                if self._closing.is_set():
                    return
                time.sleep(0.05)  # out of descriptors, or a connection reset before it was taken
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_Connection(self, conn, address[0]).run, name="http", daemon=True).start()

    def shutdown(self) -> None:
        """Stop accepting (the connections being served finish on their own threads)."""
        self._closing.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() in serve_forever
        self.sock.close()

    def date(self) -> str:
        """The Date header, formatted once a second."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True))
        return self._date[1]


class _Request:
    __slots__ = ("url", "headers", "head_done", "body", "size", "method", "keep_alive", "chunked", "too_large",
                 "refuse_now")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[str, str]] = []
        self.head_done = False
        self.body: list[bytes] = []
        self.size = 0
        self.method = "GET"
        self.keep_alive = True
        self.chunked = True  # whether the client reads chunked answers (HTTP/1.1 does)
        self.too_large = self.refuse_now = False


class _Connection:
    """One client connection: its requests parsed as their bytes arrive, answered in order."""

    def __init__(self, server: Server, sock: socket.socket, ip: str) -> None:
        self.server, self.sock, self.ip = server, sock, ip
        self.limit = server.gateway.max_body_bytes
        self.parser = httptools.HttpRequestParser(self)
        self.current: _Request | None = None
        self.complete: list[_Request] = []
        self.head_bytes = 0  # of the current request's head, read so far (see `_feed`)

    # ---- the parser's callbacks ----

    def on_message_begin(self) -> None:
        self.current = _Request()

    def on_url(self, url: bytes) -> None:
        self.current.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current.headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        request = self.current
        request.head_done = True
        request.method = self.parser.get_method().decode("ascii", "replace")
        request.keep_alive = self.parser.should_keep_alive()
        request.chunked = self.parser.get_http_version() != "1.0"
        found = dict(request.headers)
        length = found.get("content-length", "")
        request.too_large = length.isdigit() and int(length) > self.limit
        if found.get("expect", "").lower() == "100-continue":
            if request.too_large:
                request.refuse_now = True  # answered before the client sends the body
            else:
                self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        request = self.current
        request.size += len(body)
        if request.size > self.limit:
            request.too_large, request.body = True, []  # read to its end, kept no further
        elif not request.too_large:
            request.body.append(body)

    def on_message_complete(self) -> None:
        self.complete.append(self.current)
        self.current = None

    # ---- the connection ----

    def run(self) -> None:
        try:
            self._serve()
        except OSError:
            pass  # the client went away
        finally:
            self.sock.close()

    def _serve(self) -> None:
        self.sock.settimeout(KEEP_ALIVE_S)
        while True:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return
            if not data:
                return
            try:
                if not self._feed(data):
                    self._send(_HEAD_TOO_LARGE, head=False, keep_alive=False)
                    return
            except httptools.HttpParserUpgrade:
                # A request asking to switch protocols (h2c, websocket): answered in HTTP/1.1, the
                # only protocol here, as a server that ignores the offer does; then the connection
                # closes (what follows the request on it is in the other protocol).
                for request in self.complete:
                    request.keep_alive = False
                    self._answer(request)
                if not self.complete:
                    self._send(_BAD_REQUEST, head=False, keep_alive=False)
                return
            except httptools.HttpParserError:
                self._send(_BAD_REQUEST, head=False, keep_alive=False)
                return
            if self.current is not None and self.current.refuse_now:
                self._send(self.server.gateway.too_large(self.current.method, self._path(self.current)[0]),
                           head=False, keep_alive=False)
                return
            while self.complete:
                if not self._answer(self.complete.pop(0)):
                    return
            self.sock.settimeout(READ_TIMEOUT_S if self.current is not None else KEEP_ALIVE_S)

    def _reading_a_head(self) -> bool:
        return self.current is None or not self.current.head_done

    def _feed(self, data: bytes) -> bool:
        """Hand `data` to the parser; False when a request's head has run past MAX_HEAD_BYTES.

        While a head is being read the parser gets at most what takes it to the limit (it keeps a
        header's pieces by copying them together), and a head unfinished there is over it. A head is
        counted from the first byte read after the previous request ended: exactly when requests come
        one at a time; a pipelined one that begins in the middle of a read, from the next read on."""
        view = memoryview(data)
        while view:
            if not self._reading_a_head():  # a body: whole
                self.parser.feed_data(view)
                if self._reading_a_head():
                    self.head_bytes = 0
                return True
            before, ended, room = self.current, len(self.complete), MAX_HEAD_BYTES - self.head_bytes
            piece, view = view[:room], view[room:]
            self.parser.feed_data(piece)
            if not self._reading_a_head() or self.current is None:
                self.head_bytes = 0
            elif self.current is before:
                self.head_bytes += len(piece)
            else:  # began in this piece: all of it, unless a request ended in it too (then where is unknown)
                self.head_bytes = len(piece) if len(self.complete) == ended else 0
            if self.head_bytes >= MAX_HEAD_BYTES:
                return False
        return True

    @staticmethod
    def _path(request: _Request) -> tuple[str, str]:
        """(path, query) as API Gateway passes them: the path percent-decoded, the query as sent."""
        url = httptools.parse_url(request.url)
        raw = url.path.decode("ascii")
        return (unquote(raw) if "%" in raw else raw), (url.query or b"").decode("latin-1")

    def _answer(self, request: _Request) -> bool:
        """Serve one request; whether the connection stays open."""
        try:
            path, query = self._path(request)
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
            self._send(_BAD_REQUEST, head=False, keep_alive=False)
            return False
        gateway = self.server.gateway
        try:
            if request.too_large:
                response = gateway.too_large(request.method, path)
            else:
                response = gateway.handle(request.method, path, query, request.headers, b"".join(request.body),
                                          self.ip)
        except Exception:  # the gateway's own fault (a function's is its 500 already): still an answer
            logger.exception("%s %s failed in the local gateway", request.method, path)
            response = _FAILED
        return self._send(response, head=request.method == "HEAD", keep_alive=request.keep_alive,
                          chunked=request.chunked)

    def _send(self, response: HttpResponse, *, head: bool, keep_alive: bool, chunked: bool = True) -> bool:
        """Write one answer; whether the connection stays open after it."""
        status = response.status
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}"]
        lines.extend(f"{k}: {v}" for k, v in response.headers if k.lower() not in _HOP_BY_HOP)
        streamed = response.body if isinstance(response.body, StreamedBody) else None
        body = b"" if streamed is not None or status in _NO_BODY or 100 <= status < 200 else response.body
        if status in _NO_BODY:
            pass
        elif streamed is None and not _is_event_stream(response):
            lines.append(f"content-length: {len(body)}")
        elif chunked:  # SSE: no Content-Length; its chunks, then the last
            lines.append("transfer-encoding: chunked")
            if body:
                body = b"%x\r\n%b\r\n" % (len(body), body)
            if streamed is None:
                body += b"0\r\n\r\n"
        else:
            keep_alive = False  # SSE to an HTTP/1.0 client: the answer ends where the connection does
        lines.append(f"date: {self.server.date()}")
        if not keep_alive:
            lines.append("connection: close")
        head_bytes = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if streamed is not None:
            return self._stream(head_bytes, streamed, head=head, chunked=chunked) and keep_alive
        self.sock.sendall(head_bytes if head or not body else head_bytes + body)
        return keep_alive

    def _stream(self, head_bytes: bytes, body: StreamedBody, *, head: bool, chunked: bool) -> bool:
        """Write a streamed answer's head, then each chunk as its function produces it. A client that
        goes away ends the stream (the next write fails: a heartbeat finds out); the function's
        generator is closed either way, so what it holds is given back."""
        try:
            self.sock.sendall(head_bytes)
            if head:
                return True
            for chunk in body:
                if chunk:
                    self.sock.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                self.sock.sendall(b"0\r\n\r\n")
            return chunked
        except OSError:
            raise  # the client went away: the connection is closed
        except Exception:  # the function failed mid-answer: the connection closes without the last chunk
            logger.exception("a streamed answer failed")
            return False
        finally:
            body.close()


def _is_event_stream(response: HttpResponse) -> bool:
    """An SSE answer (`text/event-stream`, whatever its parameters)."""
    return any(k.lower() == "content-type" and v.split(";", 1)[0].strip().lower() == "text/event-stream"
               for k, v in response.headers)


# ---- several worker processes on one port ----------------------------------------------------------


def serve_workers(host: str, port: int, workers: int) -> None:
    """Bind host:port once and serve it from `workers` processes (`python -m functions.local.server`),
    each with its own interpreter, gateway and connection pool; a worker that dies is started again.
    Returns when this process is asked to stop (SystemExit, KeyboardInterrupt), its workers stopped."""
    sock = bind(host, port)
    sock.set_inheritable(True)
    command = [sys.executable, "-m", "functions.local.server", str(sock.fileno()), str(os.getpid())]

    def start() -> subprocess.Popen:
        return subprocess.Popen(command, pass_fds=(sock.fileno(),))

    procs = [start() for _ in range(workers)]
    try:
        while True:
            time.sleep(0.5)
            procs = [p if p.poll() is None else start() for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        sock.close()


def _worker(fd: int, parent: int) -> None:
    """One worker process: the gateway, loaded before it serves, on the socket its parent bound. It
    stops on SIGTERM, and when its parent is gone."""
    from functions.local.gateway import serving_gateway

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=orphaned, name="parent-watch", daemon=True).start()
    Server(serving_gateway(), sock=socket.socket(fileno=fd)).serve_forever()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]))
