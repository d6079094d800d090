"""A stand-in for Lambda's Runtime API on a loopback port (tests and bench/cold_start.py): it hands out
the invocations queued and records what the runtime under test answers, each streamed chunk as it
arrives (with when), the trailers, and every call in order."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    """One invocation's answer as the runtime streamed it."""

    request_id: str
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[tuple[float, bytes]] = field(default_factory=list)  # (time.monotonic(), bytes)
    trailers: dict[str, str] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def raw(self) -> bytes:
        return b"".join(c for _, c in self.chunks)

    def split(self) -> tuple[dict[str, Any], bytes]:
        """(the prelude's JSON, the body) of an HTTP integration answer."""
        prelude, _, body = self.raw.partition(b"\0" * 8)
        return json.loads(prelude), body


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a runtime that was stopped mid-call is no error
            super().handle_error(request, client_address)


class RuntimeApi:
    def __init__(self) -> None:
        self.invocations: queue.Queue[tuple[str, dict, float]] = queue.Queue()
        self.answers: dict[str, Answer] = {}
        self.errors: dict[str, tuple[dict[str, str], dict]] = {}  # path -> (headers, body)
        self.calls: list[str] = []
        self.restored = threading.Event()  # set: /restore/next answers (the environment is "restored")
        self.restored.set()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api.calls.append(f"GET {self.path}")
                if self.path.endswith("/restore/next"):
                    api.restored.wait(30)
                    return self._reply(200, b"")
                request_id, event, deadline_s = api.invocations.get()
                headers = {"Lambda-Runtime-Aws-Request-Id": request_id,
                           "Lambda-Runtime-Deadline-Ms": str(int((time.time() + deadline_s) * 1000)),
                           "Lambda-Runtime-Invoked-Function-Arn": "arn:aws:lambda:us-east-1:0:function:test",
                           "Lambda-Runtime-Trace-Id": f"Root=1-00000000-{request_id};Sampled=0",
                           "Content-Type": "application/json"}
                self._reply(200, json.dumps(event).encode(), headers)

            def do_POST(self) -> None:
                api.calls.append(f"POST {self.path}")
                if self.path.endswith("/response"):
                    return self._streamed(self.path.split("/")[-2])
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                api.errors[self.path] = (dict(self.headers), json.loads(body or b"{}"))
                self._reply(202, b"")

            def _streamed(self, request_id: str) -> None:
                answer = api.answers.setdefault(request_id, Answer(request_id))
                answer.headers = {k.lower(): v for k, v in self.headers.items()}
                if "chunked" not in answer.headers.get("transfer-encoding", ""):  # answered whole
                    answer.chunks.append((time.monotonic(), self.rfile.read(int(answer.headers["content-length"]))))
                    answer.done.set()
                    return self._reply(202, b"")
                while True:
                    size = int(self.rfile.readline().strip(), 16)
                    if size == 0:
                        break
                    answer.chunks.append((time.monotonic(), self.rfile.read(size)))
                    self.rfile.readline()
                while (line := self.rfile.readline().strip()):
                    name, _, value = line.decode().partition(":")
                    answer.trailers[name.strip().lower()] = value.strip()
                answer.done.set()
                self._reply(202, b"")

            def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def invoke(self, request_id: str, event: dict, deadline_s: float = 60.0) -> Answer:
        """Queue an invocation; its Answer fills in as the runtime streams it."""
        answer = self.answers.setdefault(request_id, Answer(request_id))
        self.invocations.put((request_id, event, deadline_s))
        return answer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
