"""The local gateway's HTTP server, spoken to over raw sockets: keep-alive and pipelining, chunked
bodies, `Expect: 100-continue`, HEAD, the body and header limits, requests that are not HTTP, and SSE
answers framed without Content-Length."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from functions.local.events import HttpResponse
from functions.local.server import MAX_HEAD_BYTES, Server


class Echo:
    """A gateway that answers what it was asked (and counts its 413s)."""

    max_body_bytes = 1000

    def __init__(self) -> None:
        self.refused: list[tuple[str, str]] = []

    def handle(self, method, path, query, headers, body, source_ip="127.0.0.1") -> HttpResponse:
        answer = {"method": method, "path": path, "query": query, "body": body.decode(), "ip": source_ip,
                  "headers": dict(headers)}
        if path == "/broken":
            raise RuntimeError("a bug in the gateway")
        status = 204 if path == "/empty" else 200
        return HttpResponse(status, [("content-type", "application/json"), ("x-echo", "1")],
                            b"" if status == 204 else json.dumps(answer).encode())

    def too_large(self, method, path) -> HttpResponse:
        self.refused.append((method, path))
        return HttpResponse(413, [("content-type", "application/json")], b'{"message":"Request Entity Too Large"}')


@pytest.fixture
def served():
    gateway = Echo()
    server = Server(gateway, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, gateway
    server.shutdown()
    thread.join(timeout=5)
    assert not thread.is_alive()


def _connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return sock


def _read_response(sock: socket.socket, buffer: bytearray, head: bool = False) -> tuple[int, dict, bytes]:
    """One response off the connection (what is left after it stays in `buffer`)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {bytes(buffer)!r}"
        buffer.extend(chunk)
    head_end = buffer.index(b"\r\n\r\n")
    lines = bytes(buffer[:head_end]).decode("latin-1").split("\r\n")
    del buffer[:head_end + 4]
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = 0 if head or status in (100, 204) else int(headers.get("content-length", 0))
    while len(buffer) < length:
        chunk = sock.recv(65536)
        assert chunk
        buffer.extend(chunk)
    body = bytes(buffer[:length])
    del buffer[:length]
    return status, headers, body


def test_keep_alive_and_pipelined_requests_are_answered_in_order(served):
    server, _ = served
    with _connect(server) as sock:
        sock.sendall(b"GET /a?x=1&y=%20 HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"POST /b%2Fc HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nApiKey: K\r\n\r\nhello")
        buffer = bytearray()
        first = _read_response(sock, buffer)
        second = _read_response(sock, buffer)
        assert first[0] == 200 and json.loads(first[2])["path"] == "/a" and json.loads(first[2])["query"] == "x=1&y=%20"
        answer = json.loads(second[2])
        assert (answer["method"], answer["path"], answer["body"]) == ("POST", "/b/c", "hello")
        assert answer["headers"]["apikey"] == "K" and answer["ip"] == "127.0.0.1"  # header names lowercased
        assert second[1]["content-length"] == str(len(second[2])) and "date" in second[1]
        sock.sendall(b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n")  # the same connection, still open
        assert json.loads(_read_response(sock, buffer)[2])["path"] == "/again"


def test_a_chunked_body_arrives_whole(served):
    server, _ = served
    with _connect(server) as sock:
        sock.sendall(b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
        status, _, body = _read_response(sock, bytearray())
        assert status == 200 and json.loads(body)["body"] == "abcdefg"


def test_expect_100_continue_is_answered_before_the_body(served):
    server, _ = served
    with _connect(server) as sock:
        sock.sendall(b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        buffer = bytearray()
        assert _read_response(sock, buffer)[0] == 100
        sock.sendall(b"ok")
        status, _, body = _read_response(sock, buffer)
        assert status == 200 and json.loads(body)["body"] == "ok"


def test_a_body_over_the_limit_is_413_without_being_kept(served):
    server, gateway = served
    with _connect(server) as sock:  # announced with Expect: refused at once, and the connection closed
        sock.sendall(b"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
        buffer = bytearray()
        status, headers, _ = _read_response(sock, buffer)
        assert status == 413 and headers["connection"] == "close"
        assert sock.recv(10) == b""
    with _connect(server) as sock:  # sent in chunks past the limit: read to its end, then refused
        chunk = b"x" * 600
        sock.sendall(b"POST /big2 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + (b"258\r\n" + chunk + b"\r\n") * 3 + b"0\r\n\r\n")
        assert _read_response(sock, bytearray())[0] == 413
    assert gateway.refused == [("POST", "/big"), ("POST", "/big2")]


def test_head_has_the_headers_only_and_204_no_length(served):
    server, _ = served
    with _connect(server) as sock:
        buffer = bytearray()
        sock.sendall(b"HEAD /h HTTP/1.1\r\nHost: t\r\n\r\nGET /empty HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, body = _read_response(sock, buffer, head=True)
        assert status == 200 and int(headers["content-length"]) > 0 and body == b""
        status, headers, body = _read_response(sock, buffer)
        assert status == 204 and "content-length" not in headers and body == b""
        sock.sendall(b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n")  # framing intact after both
        assert json.loads(_read_response(sock, buffer)[2])["path"] == "/after"


@pytest.mark.parametrize("garbage", [b"NOT HTTP AT ALL\r\n\r\n", b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n",
                                     b"GET /\xff HTTP/1.1\r\nHost: t\r\n\r\n"])
def test_what_is_not_http_is_400_and_closed(served, garbage):
    server, _ = served
    with _connect(server) as sock:
        sock.sendall(garbage)
        status, headers, _ = _read_response(sock, bytearray())
        assert status == 400 and headers["connection"] == "close"
        assert sock.recv(10) == b""


def test_a_folded_header_line_is_400_and_closed(served):
    """obs-fold (a header line continued on the next, which starts with a space): RFC 9112 lets a
    server refuse it, and this one does."""
    server, _ = served
    with _connect(server) as sock:
        sock.sendall(b"GET /f HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\n\r\n")
        status, headers, _ = _read_response(sock, bytearray())
        assert status == 400 and headers["connection"] == "close"


def _head_of(size: int, path: str = "/big") -> bytes:
    """A GET whose line and headers take exactly `size` bytes (the blank line included)."""
    start = f"GET {path} HTTP/1.1\r\nHost: t\r\nX-Pad: ".encode()
    return start + b"p" * (size - len(start) - 4) + b"\r\n\r\n"


_OVER = MAX_HEAD_BYTES + 1


@pytest.mark.parametrize("request_bytes, piece", [
    (_head_of(_OVER), None),  # one header too long
    (b"GET /many HTTP/1.1\r\n" + b"X-A: bbbbbbbbbbbbbbbbbbbbbbbb\r\n" * 600 + b"\r\n", None),  # many headers
    (b"GET /" + b"u" * _OVER + b" HTTP/1.1\r\nHost: t\r\n\r\n", None),  # the URL
    (_head_of(_OVER), 1000),  # arriving in pieces
    (b"GET /endless HTTP/1.1\r\nX-Endless: " + b"e" * (4 * 1024 * 1024), None),  # no end in sight
], ids=["header", "many-headers", "url", "in-pieces", "endless"])
def test_a_head_over_16_kib_is_431_and_closed(served, request_bytes, piece):
    server, _ = served
    with _connect(server) as sock:
        try:
            for at in range(0, len(request_bytes), piece or len(request_bytes)):
                sock.sendall(request_bytes[at:at + (piece or len(request_bytes))])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before it was all sent
        status, headers, body = _read_response(sock, bytearray())
    assert status == 431 and headers["connection"] == "close"
    assert json.loads(body) == {"message": "Request Header Fields Too Large"}


def test_heads_of_16_kib_are_served_one_after_another_and_pipelined(served):
    server, _ = served
    with _connect(server) as sock:
        buffer = bytearray()
        sock.sendall(_head_of(MAX_HEAD_BYTES, "/one"))
        assert json.loads(_read_response(sock, buffer)[2])["path"] == "/one"
        sock.sendall(_head_of(MAX_HEAD_BYTES, "/two") + _head_of(MAX_HEAD_BYTES, "/three"))
        assert json.loads(_read_response(sock, buffer)[2])["path"] == "/two"
        assert json.loads(_read_response(sock, buffer)[2])["path"] == "/three"


def test_an_upgrade_offer_is_answered_in_http_1_1_and_closed(served):
    """curl --http2 on an http:// URL offers h2c: the answer is plain HTTP/1.1, as from a server that
    does not take the offer."""
    server, _ = served
    with _connect(server) as sock:
        sock.sendall(b"GET /u HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                     b"HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n")
        status, headers, body = _read_response(sock, bytearray())
        assert status == 200 and json.loads(body)["path"] == "/u" and headers["connection"] == "close"
        assert sock.recv(10) == b""


def test_a_fault_in_the_gateway_is_a_500_and_the_connection_goes_on(served, caplog):
    server, _ = served
    with _connect(server) as sock:
        buffer = bytearray()
        sock.sendall(b"GET /broken HTTP/1.1\r\nHost: t\r\n\r\nGET /fine HTTP/1.1\r\nHost: t\r\n\r\n")
        assert _read_response(sock, buffer)[0] == 500
        assert json.loads(_read_response(sock, buffer)[2])["path"] == "/fine"
    assert "failed in the local gateway" in caplog.text


def test_http_1_0_closes_after_its_answer(served):
    server, _ = served
    with _connect(server) as sock:
        sock.sendall(b"GET /old HTTP/1.0\r\n\r\n")
        status, headers, _ = _read_response(sock, bytearray())
        assert status == 200 and headers["connection"] == "close"
        assert sock.recv(10) == b""


def test_connections_are_served_at_once_each_on_its_own_thread(served):
    """A request that waits (a long poll) holds only its own connection."""
    server, gateway = served
    release = threading.Event()
    plain = gateway.handle

    def slow(method, path, *args):
        if path == "/wait":
            release.wait(5)
        return plain(method, path, *args)

    gateway.handle = slow
    with _connect(server) as waiting, _connect(server) as other:
        waiting.sendall(b"GET /wait HTTP/1.1\r\nHost: t\r\n\r\n")
        other.sendall(b"GET /now HTTP/1.1\r\nHost: t\r\n\r\n")
        assert json.loads(_read_response(other, bytearray())[2])["path"] == "/now"
        release.set()
        assert json.loads(_read_response(waiting, bytearray())[2])["path"] == "/wait"


SSE_BODY = (b'event: data\ndata:[{"a":1}]\n\n'
            b'event: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000001","upToDate":true}\n\n')


class EchoAndSse(Echo):
    """Echo, and an SSE answer (as the durable surface's, complete) at /sse."""

    def handle(self, method, path, query, headers, body, source_ip="127.0.0.1") -> HttpResponse:
        if path == "/sse":
            return HttpResponse(200, [("content-type", "text/event-stream"), ("cache-control", "no-cache, no-store")],
                                SSE_BODY)
        return super().handle(method, path, query, headers, body, source_ip)


@pytest.fixture
def sse_served():
    server = Server(EchoAndSse(), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join(timeout=5)


def _read_chunked(sock: socket.socket, buffer: bytearray) -> bytes:
    """A chunked body off the connection, through its last chunk (what follows stays in `buffer`)."""
    body = bytearray()
    while True:
        while b"\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed mid-body: {bytes(buffer)!r}"
            buffer.extend(chunk)
        size_end = buffer.index(b"\r\n")
        size = int(bytes(buffer[:size_end]).split(b";")[0], 16)
        while len(buffer) < size_end + 2 + size + 2:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed mid-chunk: {bytes(buffer)!r}"
            buffer.extend(chunk)
        assert buffer[size_end + 2 + size:size_end + 4 + size] == b"\r\n"
        body.extend(buffer[size_end + 2:size_end + 2 + size])
        del buffer[:size_end + 4 + size]
        if size == 0:
            return bytes(body)


def test_an_sse_answer_is_chunked_without_content_length_and_the_connection_goes_on(sse_served):
    """HTTP/1.1: the SSE answer has no Content-Length (EventSource clients and the Durable Streams
    suite read it as a stream), its end is the last chunk, and the connection is kept: the next
    answer on it, a plain one, has its Content-Length and no `Connection: close`."""
    with _connect(sse_served) as sock:
        sock.sendall(b"GET /sse HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n"
                     b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n")
        buffer = bytearray()
        status, headers, _ = _read_response(sock, buffer, head=True)  # the head only: no length to read by
        assert status == 200 and headers["content-type"] == "text/event-stream"
        assert "content-length" not in headers and headers["transfer-encoding"] == "chunked"
        assert "connection" not in headers and headers["cache-control"] == "no-cache, no-store"
        assert _read_chunked(sock, buffer) == SSE_BODY
        status, headers, body = _read_response(sock, buffer)
        assert status == 200 and json.loads(body)["path"] == "/after"
        assert headers["content-length"] == str(len(body)) and "connection" not in headers
        assert "transfer-encoding" not in headers


def test_an_sse_answer_to_http_1_0_ends_with_the_connection(sse_served):
    """HTTP/1.0 has no chunked framing: the answer, without Content-Length, ends where the server
    closes the connection (even when the client asked for keep-alive)."""
    with _connect(sse_served) as sock:
        sock.sendall(b"GET /sse HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        received = bytearray()
        while chunk := sock.recv(65536):
            received.extend(chunk)
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in head.decode().split("\r\n")[1:])}
    assert head.startswith(b"HTTP/1.1 200 ") and headers["connection"] == "close"
    assert "content-length" not in headers and "transfer-encoding" not in headers
    assert body == SSE_BODY


def test_an_http_client_reads_the_sse_events_and_their_end(sse_served):
    """httpx, as a client reads an event stream: line by line, to the answer's end, then the same
    connection serves a plain answer with its Content-Length."""
    with httpx.Client(base_url=f"http://127.0.0.1:{sse_served.port}", timeout=5) as http:
        with http.stream("GET", "/sse", headers={"accept": "text/event-stream"}) as r:
            assert r.status_code == 200 and "content-length" not in r.headers
            lines = list(r.iter_lines())
        assert [line for line in lines if line.startswith("event:")] == ["event: data", "event: control"]
        assert lines[-1] == ""  # the last event's blank line, then the end of the answer
        after = http.get("/after")
        assert after.headers["content-length"] == str(len(after.content))
        assert after.headers.get("connection") != "close"
