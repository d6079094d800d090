"""Local endpoints for outbound calls (push deliveries): a raw TCP server in a thread that reads each
HTTP request and answers it as the test says, well or badly (garbage, an endless head, a trickle),
and a resolver and connector to patch in, so a test decides what a host name resolves to and
sees every address a connection went to, without a real network."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable

Answer = Callable[[socket.socket, "Endpoint"], None]


class Endpoint:
    """Serves 127.0.0.1 on a free port; `got` holds each request (head and body, raw)."""

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None) -> None:
        self.answer, self.tls = answer, tls
        self.got: list[bytes] = []
        self.arrived = threading.Event()  # set by the first complete request
        self.stop = threading.Event()
        self.sni: list[str | None] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                self._conns.append(conn)
            request = self._read_request(conn)
            self.got.append(request)
            self.arrived.set()
            self.answer(conn, self)
        except OSError:
            pass
        finally:
            conn.close()

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        for conn in self._conns:
            conn.close()


# ---- answers ------------------------------------------------------------------------------------


def status(code: int) -> Answer:
    def answer(conn: socket.socket, endpoint: Endpoint) -> None:
        conn.sendall(f"HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n".encode())

    return answer


def raw(data: bytes) -> Answer:
    def answer(conn: socket.socket, endpoint: Endpoint) -> None:
        conn.sendall(data)

    return answer


def endless(first: bytes, then: bytes) -> Answer:
    """`first`, then `then` again and again until the caller hangs up (or the test ends)."""

    def answer(conn: socket.socket, endpoint: Endpoint) -> None:
        conn.sendall(first)
        while not endpoint.stop.is_set():
            conn.sendall(then)

    return answer


def trickle(data: bytes, every_s: float = 0.2) -> Answer:
    """One byte of `data` (repeated forever) every `every_s`: each read gets something, none ends."""

    def answer(conn: socket.socket, endpoint: Endpoint) -> None:
        i = 0
        while not endpoint.stop.is_set():
            conn.sendall(data[i % len(data):i % len(data) + 1])
            i += 1
            time.sleep(every_s)

    return answer


# ---- a resolver and a connector under the test's control -----------------------------------------


class Network:
    """Patch in with `install(monkeypatch)`: `names[host]` lists the answers of successive lookups
    of `host` (the last repeats); literal addresses resolve to themselves. A connection is recorded
    in `connects` (the address it went to) and reaches the real loopback only; any other address
    is refused, as no test has a network."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = {host: list(answers) for host, answers in names.items()}
        self.lookups: dict[str, int] = {}
        self.connects: list[str] = []
        self._lock = threading.Lock()
        self._real_getaddrinfo = socket.getaddrinfo
        self._real_connect = socket.create_connection

    def getaddrinfo(self, host, port, *args, **kwargs):
        host = host.decode() if isinstance(host, bytes) else host
        if host not in self.names:
            return self._real_getaddrinfo(host, port, *args, **kwargs)
        with self._lock:
            n = self.lookups[host] = self.lookups.get(host, 0) + 1
            answers = self.names[host]
            address = answers[min(n, len(answers)) - 1]
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sockaddr = (address, port or 0, 0, 0) if family == socket.AF_INET6 else (address, port or 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]

    def create_connection(self, address, timeout=None, *args, **kwargs):
        host, port = address[0], address[1]
        ip = self.getaddrinfo(host, port)[0][4][0]  # what a connect by name would look up
        with self._lock:
            self.connects.append(ip)
        if ip in ("127.0.0.1", "::1"):
            return self._real_connect((ip, port), timeout, *args, **kwargs)
        raise ConnectionRefusedError(f"no network in tests ({ip})")

    def install(self, monkeypatch) -> Network:
        monkeypatch.setattr(socket, "getaddrinfo", self.getaddrinfo)
        monkeypatch.setattr(socket, "create_connection", self.create_connection)
        return self
