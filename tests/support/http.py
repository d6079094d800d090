"""The local gateway on a real loopback port, and a small client for it."""

from __future__ import annotations

import socket
import threading

import httpx

from functions.local.gateway import LocalGateway
from functions.local.server import Gateway, Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GatewayServer:
    """The local gateway's server (as `postbox dev` runs it) in a background thread."""

    def __init__(self, gateway: Gateway | None = None, **options: object) -> None:
        """Serves `gateway`, or a LocalGateway built with `options`."""
        self.server = Server(gateway if gateway is not None else LocalGateway(**options), "127.0.0.1", 0)
        self.port = self.server.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=10)


def client(base_url: str, key: str | None, header: str = "apikey") -> httpx.Client:
    headers = {}
    if key:
        headers = {"apikey": key} if header == "apikey" else {"Authorization": f"Bearer {key}"}
    return httpx.Client(base_url=base_url, headers=headers, timeout=60)
