"""Live events: ``watch`` (a task's stream, the tenant's stream, resuming across a cut
connection with ``Last-Event-ID``) and ``wait`` (on the stream, with a timeout)."""

from __future__ import annotations

import queue
import threading
import time

import httpx
import pytest

import slotd
from _servers import CuttingProxy
from _slotd import KEYS
from conftest import Live


def unit_ids(events: list[slotd.StreamEvent]) -> list[int]:
    return [e.data["id"] for e in events if e.event == "unit"]


def test_watch_a_task_from_its_first_event_to_its_end(client: slotd.Client) -> None:
    task_id = client.submit("fixture", {"count": 4, "polls": 1})["task_id"]
    with client.watch(task_id) as stream:
        events = list(stream)
    assert events[-1].event == "end"
    assert events[-1].data == {"task_id": task_id, "status": "completed"}
    units = [e for e in events if e.event == "unit"]
    assert all(e.id and e.task_id == task_id for e in units)
    log = [e["id"] for e in client.events(task_id)["events"]]
    assert unit_ids(events) == log, "the stream is the log: every event once, in order"
    assert stream.last_event_id == units[-1].id
    assert stream.connections == 1

    # Resuming from a cursor gives what came after it, nothing before.
    middle = units[len(units) // 2]
    with client.watch(task_id, last_event_id=middle.id) as rest:
        later = list(rest)
    assert unit_ids(later) == log[log.index(middle.data["id"]) + 1 :]


def test_watch_resumes_after_a_cut_connection_without_gap_or_repeat(live: Live, client: slotd.Client) -> None:
    task_id = client.submit("fixture", {"count": 20, "polls": 1})["task_id"]
    client.wait(task_id, timeout=60)
    log = [e["id"] for e in client.events(task_id)["events"]]
    assert len(log) > 40

    # The first connection is cut in the middle of the stream, inside an event.
    proxy = CuttingProxy(live.slotd.port, cut_after=3000)
    try:
        with slotd.Client(proxy.url, api_key=KEYS["team-a"]) as through_proxy:
            stream = through_proxy.watch(task_id)
            events = list(stream)
        assert proxy.cut.is_set()
        assert stream.connections == 2 and len(proxy.requests) == 2
        assert proxy.request_header(0, "last-event-id") is None
        resumed_from = proxy.request_header(1, "last-event-id")
        units = [e for e in events if e.event == "unit"]
        cursors = [e.id for e in units]
        assert resumed_from in cursors, "the reconnection names the last event received"
        k = cursors.index(resumed_from)
        assert 0 < k < len(units) - 1, "events came before the cut and after the resume"
        assert unit_ids(events) == log, "no event missed, none repeated, in order"
        assert events[-1].event == "end" and events[-1].data["status"] == "completed"
    finally:
        proxy.close()


def test_watch_gives_up_naming_the_cursor_when_slotd_is_gone() -> None:
    # Nothing listens on this port: the stream fails every time, then says where to resume.
    with slotd.Client("http://127.0.0.1:9", max_reconnects=2) as gone:
        stream = gone.watch("some-task", last_event_id="1.2.3")
        with pytest.raises(slotd.StreamError) as e:
            next(iter(stream))
    assert e.value.last_event_id == "1.2.3"
    assert "3 times in a row" in str(e.value)
    assert stream.connections == 3


def test_watch_the_tenant_stream(live: Live) -> None:
    connected = threading.Event()

    def on_response(response: httpx.Response) -> None:
        if response.request.url.path == "/v1/events":
            connected.set()

    http = httpx.Client(event_hooks={"response": [on_response]})
    seen: queue.Queue[slotd.StreamEvent] = queue.Queue()
    with live.client("team-a", http_client=http) as client:
        stream = client.watch()

        def read() -> None:
            try:
                for event in stream:
                    seen.put(event)
            except Exception:  # closed from the main thread
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert connected.wait(10), "the tenant stream did not open"
        task_id = client.submit("fixture", {"count": 2, "polls": 1})["task_id"]
        completed: set[str] = set()
        deadline = time.monotonic() + 30
        while len(completed) < 2:
            event = seen.get(timeout=max(0.01, deadline - time.monotonic()))
            if event.task_id == task_id and event.data["to_status"] == "completed":
                completed.add(event.data["unit_id"])
        stream.close()
    http.close()


def test_wait_follows_the_stream_not_polls(live: Live) -> None:
    requests: list[str] = []
    http = httpx.Client(event_hooks={"request": [lambda r: requests.append(f"{r.method} {r.url.path}")]})
    with live.client("team-a", http_client=http) as client:
        task_id = client.submit("fixture", {"count": 3, "polls": 3})["task_id"]
        requests.clear()
        view = client.wait(task_id, timeout=30)
    http.close()
    assert view["status"] == "completed" and view["completed"] == 3
    assert requests == [
        f"GET /v1/tasks/{task_id}",
        f"GET /v1/tasks/{task_id}/events",
        f"GET /v1/tasks/{task_id}",
    ]


def test_wait_times_out_on_a_task_that_does_not_end(client: slotd.Client, blocker: str) -> None:
    waiting = client.submit("fixture-b", {"count": 1, "behavior": "idle"})["task_id"]
    started = time.monotonic()
    with pytest.raises(slotd.WaitTimeout) as e:
        client.wait(waiting, timeout=1.0)
    took = time.monotonic() - started
    assert 1.0 <= took < 5.0, took
    assert e.value.task_id == waiting
    assert e.value.task is not None and e.value.task["status"] == "pending"
    client.cancel(waiting)
    assert "did not end within 1 s" in str(e.value)


def test_wait_on_an_ended_task_returns_at_once(client: slotd.Client) -> None:
    task_id = client.submit("fixture", {"count": 1, "polls": 0})["task_id"]
    first = client.wait(task_id, timeout=30)
    started = time.monotonic()
    assert client.wait(task_id, timeout=0.5) == first
    assert time.monotonic() - started < 0.5


def test_an_error_event_resumes_from_the_last_event() -> None:
    """slotd ends a stream with ``event: error`` when its store fails; the client resumes
    after the last event it got. A scripted SSE server (a real HTTP exchange) plays slotd."""
    import http.server
    import json as _json
    import socketserver

    heads: list[str | None] = []
    bodies = [
        'event: unit\nid: 1.5.0\ndata: {"id": 5, "task_id": "t", "unit_id": "u", "to_status": "submitted"}\n\n'
        ': keep-alive\n\n'
        'event: error\ndata: {"message": "reading events: database is locked"}\n\n',
        'event: unit\nid: 1.6.0\ndata: {"id": 6, "task_id": "t",\ndata: "unit_id": "u", "to_status": "completed"}\n\n'
        'event: end\ndata: {"task_id": "t", "status": "completed"}\n\n',
    ]

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            heads.append(self.headers.get("last-event-id"))
            body = bodies[min(len(heads), len(bodies)) - 1].encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with slotd.Client(f"http://127.0.0.1:{server.server_address[1]}") as client:
            stream = client.watch("t")
            events = list(stream)
        assert heads == [None, "1.5.0"]
        assert [(e.event, e.id) for e in events] == [("unit", "1.5.0"), ("unit", "1.6.0"), ("end", None)]
        assert events[1].data["to_status"] == "completed", "multi-line data is joined"
        assert events[2].data == _json.loads('{"task_id": "t", "status": "completed"}')
        assert stream.connections == 2 and stream.last_event_id == "1.6.0"
    finally:
        server.shutdown()
        server.server_close()
