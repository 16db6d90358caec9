"""The retry policy both clients share (docs/api.md, "Client retry policy"), replayed from
``clients/conformance/retry-policy.json``, the file the TypeScript suite replays too
(``clients/typescript/test/retry-conformance.test.js``): a local HTTP server answers each
case's requests with its scripted answers, and the case says what the server must see (how
many requests) and what the call must end with, for the blocking and the asyncio client.
Above all: a create without an idempotency key is never sent twice after an answer that
leaves open whether it was stored."""

from __future__ import annotations

import asyncio
import http.server
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import slotd
from _servers import _serve

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[2] / "conformance" / "retry-policy.json").read_text()
)["cases"]


class Replay:
    """Answers request N of a case with ``answers[N]`` (the last one again past the end) and
    records each request's line, arrival time and body ``idempotency_key``."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []
        self.seen: list[tuple[str, float, Any]] = []
        replay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                text = self.rfile.read(length)
                at = time.monotonic()
                try:
                    key = json.loads(text).get("idempotency_key") if text else None
                except (ValueError, AttributeError):
                    key = None
                answer = replay.answers[min(len(replay.seen), len(replay.answers) - 1)]
                replay.seen.append((f"{self.command} {self.path}", at, key))
                if answer.get("drop"):
                    self.close_connection = True
                    return
                status = int(answer["status"])
                if "problem" in answer:
                    kind = "application/problem+json"
                    slug = answer["problem"]
                    body = json.dumps(
                        {
                            "type": f"urn:slotd:problem:{slug}",
                            "title": slug,
                            "status": status,
                            "detail": f"scripted {slug}",
                        }
                    ).encode()
                elif "text" in answer:
                    kind, body = "text/html", str(answer["text"]).encode()
                else:
                    kind, body = "application/json", json.dumps(answer.get("json", {})).encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                for k, v in (answer.get("headers") or {}).items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer
            do_PUT = _answer

        self.server = _serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def play(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.seen = []

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def replay() -> Iterator[Replay]:
    r = Replay()
    try:
        yield r
    finally:
        r.close()


def _options(case: dict[str, Any]) -> dict[str, Any]:
    spec = case.get("client") or {}
    options: dict[str, Any] = {}
    if "max_retries" in spec:
        options["max_retries"] = spec["max_retries"]
    if "max_retry_wait_s" in spec:
        options["max_retry_wait"] = float(spec["max_retry_wait_s"])
    return options


def _call(client: Any, spec: dict[str, Any]) -> Any:
    """The case's call on either client (the async one's calls return awaitables)."""
    op = spec["op"]
    if op == "submit":
        return client.submit(spec["type"], spec["payload"], idempotency_key=spec["idempotency_key"])
    if op == "get":
        return client.get(spec["task_id"])
    if op == "cancel":
        return client.cancel(spec["task_id"])
    if op == "retry":
        return client.retry(spec["task_id"])
    if op == "set_budget":
        return client.set_budget(spec["tenant"], limit=spec["limit"], period=spec["period"])
    if op == "me":
        return client.me()
    raise AssertionError(f"retry-policy.json: unknown op {op}")


def _run_sync(replay: Replay, case: dict[str, Any]) -> tuple[Any, BaseException | None]:
    with slotd.Client(replay.url, **_options(case)) as client:
        try:
            return _call(client, case["call"]), None
        except (slotd.ApiError, slotd.TransportError) as e:
            return None, e


def _run_async(replay: Replay, case: dict[str, Any]) -> tuple[Any, BaseException | None]:
    async def run() -> tuple[Any, BaseException | None]:
        async with slotd.AsyncClient(replay.url, **_options(case)) as client:
            try:
                return await _call(client, case["call"]), None
            except (slotd.ApiError, slotd.TransportError) as e:
                return None, e

    return asyncio.run(run())


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_retry_policy(replay: Replay, case: dict[str, Any], flavour: str) -> None:
    replay.play(case["answers"])
    started = time.monotonic()
    result, error = (_run_sync if flavour == "sync" else _run_async)(replay, case)
    took_ms = (time.monotonic() - started) * 1000
    expect = case["expect"]

    assert [line for line, _, _ in replay.seen] == expect["requests"], (
        f"the requests the server saw (the call ended with {error!r})"
    )
    if case["call"]["op"] == "submit":
        for _, _, key in replay.seen:
            assert key == case["call"]["idempotency_key"], "every send carries the same idempotency key"

    outcome = expect["outcome"]
    if outcome == "ok":
        assert error is None, f"expected success, got {error!r}"
        answers = case["answers"]
        assert result == answers[min(len(replay.seen), len(answers)) - 1]["json"]
    elif outcome == "transport":
        assert isinstance(error, slotd.TransportError), f"expected a TransportError, got {error!r}"
    else:
        assert isinstance(error, slotd.ApiError), f"expected an ApiError, got {error!r}"
        assert error.status == outcome["status"]
        assert error.type == outcome["type"]

    for i, least in enumerate(expect.get("min_gaps_ms", [])):
        gap = (replay.seen[i + 1][1] - replay.seen[i][1]) * 1000
        assert gap >= least, f"request {i + 2} came {gap:.0f} ms after request {i + 1}, not at least {least} ms"
    if "max_call_ms" in expect:
        assert took_ms <= expect["max_call_ms"], f"the call took {took_ms:.0f} ms, more than {expect['max_call_ms']} ms"
