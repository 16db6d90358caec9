#!/usr/bin/env python3
"""A completion webhook receiver: verify, deduplicate, act once, answer 2xx.

slotd delivers each task's end at least once, with one ``webhook-id`` per delivery (docs/api.md,
"Completion webhooks"). This receiver verifies the Standard Webhooks signature with
:func:`slotd.webhooks.verify`, records the id and the task's end in one SQLite transaction
(a resend of an id already acted on is skipped), and answers 204 once that commits; a forged or
stale delivery is answered 400 and never acted on.

    python3 examples/python/webhook_receiver.py --listen 0.0.0.0:8000 \\
        --secret "$SLOTD_WEBHOOK_SECRET" --db webhooks.sqlite

It prints one line per request, as JSON: ``{"outcome": "recorded" | "duplicate" | "refused",
...}``; the first line is ``{"listening": "HOST:PORT"}``.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sqlite3
import sys
import threading
from typing import Any

from slotd import webhooks

SCHEMA = """
CREATE TABLE IF NOT EXISTS seen_webhooks (id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS task_ends (task_id TEXT, event TEXT, status TEXT, completed INTEGER, total INTEGER);
"""


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def make_handler(secret: str, db_path: str) -> type[http.server.BaseHTTPRequestHandler]:
    lock = threading.Lock()  # SQLite: one writer at a time
    with sqlite3.connect(db_path) as db:
        db.executescript(SCHEMA)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                event = webhooks.verify(secret, self.headers, body)
            except webhooks.WebhookVerificationError as e:
                say(outcome="refused", reason=e.reason, detail=str(e))
                return self.answer(400)
            msg_id = self.headers["webhook-id"]
            task = event["data"]
            with lock, sqlite3.connect(db_path) as db:  # one transaction: the id and the action
                new = db.execute("INSERT OR IGNORE INTO seen_webhooks (id) VALUES (?)", (msg_id,)).rowcount == 1
                if new:
                    db.execute(
                        "INSERT INTO task_ends VALUES (?, ?, ?, ?, ?)",
                        (task["task_id"], event["type"], task["status"], task["completed"], task["total"]),
                    )
            say(outcome="recorded" if new else "duplicate", id=msg_id, type=event["type"],
                task_id=task["task_id"], status=task["status"], completed=task["completed"], total=task["total"])
            self.answer(204)  # after the commit: a 2xx tells slotd to stop sending it

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8000")
    parser.add_argument("--secret", default=os.environ.get("SLOTD_WEBHOOK_SECRET"))
    parser.add_argument("--db", default="webhooks.sqlite")
    args = parser.parse_args()
    if not args.secret:
        parser.error("--secret (or SLOTD_WEBHOOK_SECRET): slotd's [webhooks] secret, whsec_...")
    host, _, port = args.listen.rpartition(":")
    server = http.server.ThreadingHTTPServer((host, int(port)), make_handler(args.secret, args.db))
    say(listening=f"{host}:{server.server_address[1]}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
