"""The local gateway on a real loopback port, and a small client for it."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import uvicorn

from functions.local.gateway import LocalGateway


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GatewayServer:
    """uvicorn serving the local gateway in a background thread."""

    def __init__(self, **gateway: object) -> None:
        self.port = free_port()
        config = uvicorn.Config(LocalGateway(**gateway), host="127.0.0.1", port=self.port, log_level="warning",
                                access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("local gateway did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def client(base_url: str, key: str | None, header: str = "apikey") -> httpx.Client:
    headers = {}
    if key:
        headers = {"apikey": key} if header == "apikey" else {"Authorization": f"Bearer {key}"}
    return httpx.Client(base_url=base_url, headers=headers, timeout=60)
