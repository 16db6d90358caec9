"""The small real servers the suite runs beside slotd: the stub provider the fixture handler
speaks to, a webhook receiver, a TCP proxy a test cuts, and a scripted HTTP server for the
retry rules. Each listens on a loopback port of its own (port 0: the kernel picks a free one)."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def free_port() -> int:
    """A port free now (bound to port 0 and released): for processes that take a port number."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> _Server:
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, name=handler.__name__, daemon=True).start()
    return server


# ------------------------------------------------------------------------------------------
# The stub provider (the protocol of slotd-testkit's stub, which plugins/fixture speaks)
# ------------------------------------------------------------------------------------------

FILE_BYTES = 4 * 1024


def stub_file_bytes(job_id: str) -> bytes:
    """The stub's deterministic result file of a job (as slotd-testkit's ``file_bytes``)."""
    out = b""
    block = hashlib.sha256(job_id.encode()).digest()
    while len(out) < FILE_BYTES:
        out += block
        block = hashlib.sha256(block).digest()
    return out[:FILE_BYTES]


class StubProvider:
    """``POST /jobs``, ``GET /jobs/{id}``, ``GET /jobs/by-key/{key}``, ``GET /files/{id}``:
    a job answers ``running`` to its first ``polls`` polls and ends on the next."""

    def __init__(self, limit: int = 100) -> None:
        self.lock = threading.Lock()
        self.limit = limit
        self.jobs: dict[str, dict[str, Any]] = {}
        self.by_key: dict[str, str] = {}
        self.next_id = 0
        self.in_flight = 0
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any, kind: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                req = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/jobs":
                    return self._send(404, {"error": "no such path"})
                with stub.lock:
                    if req["key"] in stub.by_key:
                        return self._send(409, {"id": stub.by_key[req["key"]]})
                    if stub.in_flight >= stub.limit:
                        return self._send(429, {"error": "over capacity"})
                    job_id = f"job-{stub.next_id}"
                    stub.next_id += 1
                    stub.jobs[job_id] = {
                        "id": job_id,
                        "status": "running",
                        "polls_left": int(req.get("polls") or 0),
                        "fails": req.get("outcome") == "fail",
                        "code": req.get("code"),
                        "message": req.get("message"),
                    }
                    stub.by_key[req["key"]] = job_id
                    stub.in_flight += 1
                self._send(200, {"id": job_id})

            def _job_json(self, job: dict[str, Any]) -> dict[str, Any]:
                host = self.headers.get("host")
                failed = job["status"] == "failed"
                return {
                    "id": job["id"],
                    "status": job["status"],
                    "code": (job["code"] or "failed") if failed else None,
                    "message": (job["message"] or "the job failed") if failed else None,
                    "url": f"http://{host}/files/{job['id']}" if job["status"] == "succeeded" else None,
                }

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                with stub.lock:
                    if parts[:2] == ["jobs", "by-key"] and len(parts) == 3:
                        job_id = stub.by_key.get(parts[2])
                        if job_id is None:
                            return self._send(404, {"error": "no job with that key"})
                        return self._send(200, self._job_json(stub.jobs[job_id]))
                    if parts[0] == "jobs" and len(parts) == 2:
                        job = stub.jobs.get(parts[1])
                        if job is None:
                            return self._send(404, {"error": "no such job"})
                        if job["status"] == "running":
                            if job["polls_left"] == 0:
                                job["status"] = "failed" if job["fails"] else "succeeded"
                                stub.in_flight -= 1
                            else:
                                job["polls_left"] -= 1
                        return self._send(200, self._job_json(job))
                    if parts[0] == "files" and len(parts) == 2 and parts[1] in stub.jobs:
                        return self._send(200, stub_file_bytes(parts[1]), "application/octet-stream")
                self._send(404, {"error": "no such path"})

        self.server = _serve(Handler)
        self.port = self.server.server_address[1]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------------------------------
# A webhook receiver
# ------------------------------------------------------------------------------------------


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float = field(default_factory=time.time)


class WebhookReceiver:
    """Records every POST (headers as sent, raw body) and answers ``status`` (204)."""

    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.deliveries: list[Delivery] = []
        self.cond = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with receiver.cond:
                    receiver.deliveries.append(
                        Delivery(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    receiver.cond.notify_all()
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = _serve(Handler)
        self.port = self.server.server_address[1]

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_for(self, match: Callable[[Delivery], bool], timeout: float) -> Delivery:
        """The first delivery ``match`` accepts, waiting (on the condition) up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for d in self.deliveries:
                    if match(d):
                        return d
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no matching webhook within {timeout} s; got {len(self.deliveries)}: "
                        + "; ".join(d.body[:120].decode(errors="replace") for d in self.deliveries)
                    )
                self.cond.wait(left)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------------------------------
# A TCP proxy that cuts its first connection after so many response bytes
# ------------------------------------------------------------------------------------------


class CuttingProxy:
    """Forwards TCP to ``upstream``. The first connection is cut (both ends closed) once
    ``cut_after`` bytes of the response body went to the client; later ones pass whole. Each
    connection's request head is kept, so a test can read what the client sent."""

    def __init__(self, upstream_port: int, cut_after: int) -> None:
        self.upstream_port = upstream_port
        self.cut_after = cut_after
        self.requests: list[bytes] = []
        self.cut = threading.Event()
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self.lock:
                index = len(self.requests)
                self.requests.append(b"")
            threading.Thread(target=self._up, args=(client, upstream, index), daemon=True).start()
            threading.Thread(target=self._down, args=(client, upstream, index), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, index: int) -> None:
        try:
            while data := client.recv(65536):
                with self.lock:
                    if b"\r\n\r\n" not in self.requests[index]:
                        self.requests[index] += data
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _down(self, client: socket.socket, upstream: socket.socket, index: int) -> None:
        head = b""
        body_sent = 0
        try:
            while data := upstream.recv(4096):
                if index == 0 and not self.cut.is_set():
                    if b"\r\n\r\n" not in head:
                        head += data
                        if b"\r\n\r\n" in head:
                            body_sent = len(head.split(b"\r\n\r\n", 1)[1])
                    else:
                        body_sent += len(data)
                    if body_sent >= self.cut_after:
                        # Forward only part of this read: the cut falls inside an event.
                        client.sendall(data[: max(1, len(data) // 2)])
                        self.cut.set()
                        return
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)

    def request_header(self, index: int, name: str) -> str | None:
        head = self.requests[index].split(b"\r\n\r\n", 1)[0].decode("latin-1")
        for line in head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None

    def close(self) -> None:
        self._closed = True
        _close(self.listener)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


# ------------------------------------------------------------------------------------------
# A scripted HTTP server: answers each request with the next of a list
# ------------------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    body: Any = None
    #: A value may be a function, called when the answer is sent.
    headers: dict[str, Any] = field(default_factory=dict)


class ScriptedServer:
    """Answers request N with ``answers[N]`` (the last one again past the end) and records
    each request's method, path and arrival time."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, str, float]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                answer = server.answers[min(len(server.seen), len(server.answers) - 1)]
                server.seen.append((self.command, self.path, time.monotonic()))
                data = json.dumps(answer.body).encode() if answer.body is not None else b""
                self.send_response(answer.status)
                kind = "application/problem+json" if answer.status >= 400 else "application/json"
                self.send_header("content-type", kind)
                for k, v in answer.headers.items():
                    self.send_header(k, v() if callable(v) else v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _answer
            do_POST = _answer
            do_PUT = _answer

        self.server = _serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
