#!/usr/bin/env python3
"""A 36-shot Kling storyboard on slotd: submit it, follow it, receive its completion webhook,
retry only the shots that failed, and read each shot's file.

This is the job the seed ran as three Celery tasks per shot (``submit_shot`` ->
``poll_video_task`` retrying itself every 5 s -> ``download_upload_shot``); see
docs/migrating-from-celery.md. Here it is one task of 36 units: slotd keeps Kling's 20 slots
busy, polls, downloads and stores, and tells us when it is done.

    export SLOTD_URL=http://127.0.0.1:8080 SLOTD_API_KEY=... SLOTD_WEBHOOK_SECRET=whsec_...
    python3 examples/python/submit_36_shots.py --objects-dir /var/lib/slotd/objects

The completion webhook is received by a small HTTP server this script starts (``--listen``,
default a free loopback port). slotd must be able to reach it: on one machine that needs
``[webhooks] allow_private = true`` in slotd's configuration; in production pass
``--public-url`` with an address slotd reaches. Exit status 0 once every shot's file is read
and matches its sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import os
import queue
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import slotd
from slotd import webhooks


def storyboard(shots: int, model: str) -> dict[str, Any]:
    """The ``video`` task's payload (the kling-video handler's): one unit per shot."""
    return {
        "model_name": model,
        "mode": "std",
        "duration": "5",
        "aspect_ratio": "16:9",
        "shots": [{"prompt": f"shot {i + 1}: the cat crosses the rooftop, dusk"} for i in range(shots)],
    }


class Receiver:
    """The completion webhook endpoint: verify, deduplicate on ``webhook-id``, hand over."""

    def __init__(self, listen: str, secret: str) -> None:
        self.events: queue.Queue[webhooks.WebhookEvent] = queue.Queue()
        self.seen: set[str] = set()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    event = webhooks.verify(secret, self.headers, body)
                except webhooks.WebhookVerificationError as e:
                    print(f"webhook refused ({e.reason}): {e}", flush=True)
                    self.send_response(400)
                    self.end_headers()
                    return
                msg_id = self.headers["webhook-id"]
                if msg_id not in receiver.seen:  # at least once: act on each id once
                    receiver.seen.add(msg_id)
                    receiver.events.put(event)
                self.send_response(204)
                self.end_headers()

        host, _, port = listen.rpartition(":")
        self.server = http.server.ThreadingHTTPServer((host, int(port)), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"{host}:{self.server.server_address[1]}"

    def wait_for(self, task_id: str, timeout: float) -> webhooks.WebhookEvent:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no completion webhook for task {task_id} within {timeout:g} s")
            event = self.events.get(timeout=left)
            if event["data"]["task_id"] == task_id:
                return event


class Progress:
    """Which shots completed and which failed, from the unit events."""

    def __init__(self, total: int, started: float) -> None:
        self.total, self.started = total, started
        self.done: set[str] = set()
        self.failed: set[str] = set()

    def see(self, unit: str, status: str) -> bool:
        """Take one event in; whether the counts changed."""
        before = (len(self.done), len(self.failed))
        if status == "completed":
            self.done.add(unit)
            self.failed.discard(unit)
        elif status == "failed":
            self.failed.add(unit)
        else:
            self.failed.discard(unit)  # resubmitted after a retry
        return (len(self.done), len(self.failed)) != before

    def line(self) -> str:
        return (f"[{time.monotonic() - self.started:6.1f}s] {len(self.done)}/{self.total} completed, "
                f"{len(self.failed)} failed")


def follow(client: slotd.Client, task_id: str, progress: Progress, cursor: str | None) -> tuple[str, str | None]:
    """Print progress from the live stream until the task ends; its status and the cursor to
    resume from (after a retry, only the new events are read)."""
    with client.watch(task_id, last_event_id=cursor) as stream:
        for event in stream:
            if event.event == "end":
                return str(event.data["status"]), stream.last_event_id
            if progress.see(event.data["unit_id"], event.data["to_status"]):
                print(progress.line(), flush=True)
    raise RuntimeError("the stream ended without the task's end")


def read_files(view: slotd.models.TaskView, objects_dir: Path | None) -> int:
    """Check each completed shot's stored file against its sha256; the bytes read."""
    total = 0
    for result in view["results"]:
        key, digest, size = result["object_key"], result["sha256"], result["bytes"]
        if objects_dir is None:
            print(f"shot {result['index'] + 1:2}: {key} ({size} bytes)")
            continue
        data = (objects_dir / key).read_bytes()
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise RuntimeError(f"shot {result['index'] + 1}: {key} does not match its sha256")
        total += len(data)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SLOTD_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--key", default=os.environ.get("SLOTD_API_KEY"))
    parser.add_argument("--webhook-secret", default=os.environ.get("SLOTD_WEBHOOK_SECRET"))
    parser.add_argument("--listen", default="127.0.0.1:0", help="the webhook receiver's address")
    parser.add_argument("--public-url", help="the receiver's URL as slotd reaches it (default http://LISTEN)")
    parser.add_argument("--objects-dir", type=Path, default=os.environ.get("SLOTD_OBJECTS_DIR"),
                        help="slotd's local object store (file://), to read the files from")
    parser.add_argument("--shots", type=int, default=36)
    parser.add_argument("--model", default="kling-v1-6")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the whole storyboard")
    parser.add_argument("--max-retries", type=int, default=3, help="rounds of retrying failed shots")
    args = parser.parse_args()
    if not args.webhook_secret:
        parser.error("--webhook-secret (or SLOTD_WEBHOOK_SECRET): slotd's [webhooks] secret, whsec_...")

    receiver = Receiver(args.listen, args.webhook_secret)
    callback = (args.public_url or f"http://{receiver.address}") + "/slotd-webhook"
    started = time.monotonic()
    deadline = started + args.timeout

    with slotd.Client(args.url, api_key=args.key) as client:
        task = client.submit(
            "video",
            storyboard(args.shots, args.model),
            idempotency_key=f"storyboard-{uuid.uuid4()}",  # a resubmission after a crash names the same task
            callback_url=callback,
        )
        task_id = task["task_id"]
        print(f"submitted task {task_id}: {args.shots} shots", flush=True)

        progress = Progress(args.shots, started)
        status, cursor = follow(client, task_id, progress, None)
        event = receiver.wait_for(task_id, timeout=max(1.0, deadline - time.monotonic()))
        print(f"webhook {event['type']}: {event['data']['message']}", flush=True)
        view = client.get(task_id)

        for attempt in range(1, args.max_retries + 1):
            if status == "completed":
                break
            failed = [r for r in view["results"] if r["status"] == "failed"]
            for r in failed:
                print(f"shot {r['index'] + 1} failed: {r.get('error')}", flush=True)
            retried = client.retry(task_id)["retried"]
            print(f"retry {attempt}: {retried} failed shots resubmitted, the {view['completed']} completed ones kept", flush=True)
            # The retried task's next end is delivered as a webhook of its own too (id
            # msg_<task>_<event>_<n>); the example follows it on its stream to show each shot's
            # progress (resuming after the events already read).
            status, cursor = follow(client, task_id, progress, cursor)
            view = client.get(task_id)

        if status != "completed":
            print(f"task {task_id} ended {status}: {view.get('error')}", file=sys.stderr)
            return 1
        size = read_files(view, args.objects_dir)
        checked = f", {size} bytes, every sha256 matches" if args.objects_dir else ""
        print(f"task {task_id} completed: {view['completed']}/{view['total']} shots{checked}, "
              f"in {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
