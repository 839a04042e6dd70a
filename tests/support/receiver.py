"""A webhook receiver for tests: an HTTP server on a loopback port that answers with scripted statuses."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG = -1  # a scripted answer: hold the request open until the receiver stops


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Answers each POST with the next scripted status (the last one repeats) and keeps what it got."""

    url: str
    script: list[int]
    requests: list[Received] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_status(self, received: Received) -> int:
        with self.lock:
            self.requests.append(received)
            index = min(len(self.requests), len(self.script)) - 1
            return self.script[index]


@contextmanager
def receiver(script: list[int], path: str = "/hooks/swapfarm") -> Iterator[Receiver]:
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            status = holder[0].next_status(Received({k.lower(): v for k, v in self.headers.items()}, body))
            if status == HANG:
                holder[0].released.wait(120)
                return
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    holder.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}{path}", script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        holder[0].released.set()
        server.shutdown()
        server.server_close()
