"""Errors as exceptions carrying the problem+json fields (live: 400, 401, 403, 404, 422, 429
with its retries, and 502 for a handler crash, sent once), and the retry rules on a scripted
server (503 then 200, dates in Retry-After, 500/502/504 not retried)."""

from __future__ import annotations

import email.utils
import math
import time

import httpx
import pytest

import slotd
from _servers import Answer, ScriptedServer
from conftest import Live


def test_422_names_the_field(client: slotd.Client) -> None:
    with pytest.raises(slotd.UnprocessableError) as e:
        client.submit("fixture", {"count": "three"})
    err = e.value
    assert err.status == 422
    assert err.type == "urn:slotd:problem:validation"
    assert err.title == "Validation failed"
    assert err.field == "count"
    assert "count must be an integer" in err.detail
    assert err.problem["field"] == "count"
    assert "422" in str(err) and "count" in str(err) and "/v1/tasks/fixture" in str(err)

    with pytest.raises(slotd.UnprocessableError) as e:
        client.submit("fixture", {"count": 1}, priority=5000)
    assert e.value.field == "priority"


def test_400_names_the_field(client: slotd.Client) -> None:
    with pytest.raises(slotd.BadRequestError) as e:
        client.list_page(limit=0)
    assert e.value.status == 400
    assert e.value.type == "urn:slotd:problem:bad-request"
    assert e.value.field == "limit"


def test_404_for_an_unknown_task_type_and_another_tenants_task(live: Live, client: slotd.Client) -> None:
    with pytest.raises(slotd.NotFoundError) as e:
        client.get("no-such-task")
    assert e.value.status == 404
    assert e.value.type == "urn:slotd:problem:not-found"
    with pytest.raises(slotd.NotFoundError):
        client.submit("no-such-type", {})
    mine = client.submit("fixture", {"count": 1, "polls": 0})["task_id"]
    with live.client("team-b") as other:
        with pytest.raises(slotd.NotFoundError):
            other.get(mine)
        with pytest.raises(slotd.NotFoundError):
            other.cancel(mine)
        with pytest.raises(slotd.NotFoundError):
            list(other.watch(mine))


def test_401_without_a_key_or_with_a_wrong_one(live: Live) -> None:
    for key in ("not-a-key-of-slotd", ""):
        with slotd.Client(live.url, api_key=key) as stranger:
            with pytest.raises(slotd.UnauthorizedError) as e:
                stranger.me()
            assert e.value.status == 401
            assert e.value.type == "urn:slotd:problem:unauthorized"
            assert e.value.title == "Unauthorized"
            with pytest.raises(slotd.UnauthorizedError):
                list(stranger.watch())


def test_403_for_another_tenants_list(client: slotd.Client) -> None:
    with pytest.raises(slotd.ForbiddenError) as e:
        client.list_page(tenant="team-b")
    assert e.value.status == 403 and e.value.type == "urn:slotd:problem:forbidden"


def test_429_is_retried_after_retry_after(live: Live) -> None:
    """The tenant's real rate limit (`[api] rate_limit`, 50/s with a burst of 100): the call
    that meets the 429 waits its `Retry-After` and then succeeds."""
    answers: list[tuple[int, str | None, float]] = []
    http = httpx.Client(
        event_hooks={
            "response": [lambda r: answers.append((r.status_code, r.headers.get("retry-after"), time.monotonic()))]
        }
    )
    with live.client("burst", http_client=http) as client:
        for _ in range(1000):
            assert client.me()["tenant"] == "burst"
            if any(status == 429 for status, _, _ in answers):
                break
    http.close()
    limited = next(i for i, (status, _, _) in enumerate(answers) if status == 429)
    _, retry_after, at = answers[limited]
    assert retry_after is not None and float(retry_after) >= 1
    status, _, next_at = answers[limited + 1]
    assert status == 200, answers[limited:]
    assert next_at - at >= float(retry_after) - 0.05, "the retry waited Retry-After"
    assert limited + 2 == len(answers), "the call that met the 429 was the last"

    # With retries off the 429 is raised, carrying Retry-After.
    with live.client("burst", max_retries=0) as impatient:
        with pytest.raises(slotd.RateLimitedError) as e:
            for _ in range(1000):
                impatient.me()
    assert e.value.status == 429 and e.value.type == "urn:slotd:problem:rate-limited"
    assert e.value.retry_after is not None and e.value.retry_after >= 1


def test_a_handler_crash_on_the_payload_is_502_and_sent_once(live: Live, client: slotd.Client) -> None:
    """A handler whose `plan` crashes on this payload is slotd's 502 `handler-fault`, without
    Retry-After and with nothing stored: the same payload would crash it again, so the client
    sends it once (even with retries on) and raises `ServerError`."""
    answers: list[tuple[int, str | None]] = []
    http = httpx.Client(
        event_hooks={"response": [lambda r: answers.append((r.status_code, r.headers.get("retry-after")))]}
    )
    before = len(list(client.list_tasks(type="fixture", page_size=500)))
    with live.client("team-a", http_client=http, max_retries=2) as retrying:
        with pytest.raises(slotd.ServerError) as e:
            retrying.submit("fixture", {"count": 1, "behavior": "plan-trap"})
    http.close()
    assert answers == [(502, None)], "sent once, and slotd asked for no retry"
    assert not isinstance(e.value, slotd.UnavailableError)
    assert e.value.status == 502 and e.value.type == "urn:slotd:problem:handler-fault"
    assert e.value.retry_after is None
    assert "not worth retrying" in str(e.value.detail)
    assert len(list(client.list_tasks(type="fixture", page_size=500))) == before, "nothing stored"


PROBLEM_503 = {"type": "urn:slotd:problem:overloaded", "title": "Server busy", "status": 503, "detail": "busy"}
PROBLEM_TIMEOUT = {"type": "urn:slotd:problem:timeout", "title": "Request timed out", "status": 503, "detail": "request timed out"}
ACCEPTED = {"task_id": "t1", "status": "pending"}


def scripted(answers: list[Answer]) -> ScriptedServer:
    return ScriptedServer(answers)


def test_503_then_200_succeeds_after_retry_after_in_seconds_or_as_a_date() -> None:
    """A scripted HTTP server (a real exchange; slotd does not answer 503 and then 200 on
    demand): 503 with `Retry-After: 1`, then 503 with an HTTP date, then 200."""
    def two_seconds_on() -> str:  # whole seconds: at least 1 s from now
        return email.utils.formatdate(math.floor(time.time()) + 2, usegmt=True)

    server = scripted(
        [
            Answer(503, PROBLEM_503, {"retry-after": "1"}),
            Answer(503, PROBLEM_503, {"retry-after": two_seconds_on}),
            Answer(202, ACCEPTED),
        ]
    )
    try:
        with slotd.Client(server.url) as client:
            assert client.submit("video", {"shots": []}, idempotency_key="k")["task_id"] == "t1"
        times = [t for _, _, t in server.seen]
        assert len(times) == 3
        assert times[1] - times[0] >= 0.95
        assert times[2] - times[1] >= 0.95, "the date form was honoured"
    finally:
        server.close()


def test_a_timed_out_create_without_idempotency_key_is_not_repeated() -> None:
    server = scripted(
        [
            Answer(503, PROBLEM_TIMEOUT, {"retry-after": "0"}),
            Answer(503, PROBLEM_TIMEOUT, {"retry-after": "0"}),
            Answer(202, ACCEPTED),
        ]
    )
    try:
        with slotd.Client(server.url) as client:
            with pytest.raises(slotd.UnavailableError) as e:
                client.submit("video", {"shots": []})
            assert e.value.type == "urn:slotd:problem:timeout"
            assert len(server.seen) == 1, "a create that may have happened is not sent again"
            # With a key, sending it again is safe: the same key answers the same task.
            assert client.submit("video", {"shots": []}, idempotency_key="k")["task_id"] == "t1"
            assert len(server.seen) == 3
    finally:
        server.close()


@pytest.mark.parametrize("status", [500, 502, 504, 409])
def test_other_errors_are_not_retried(status: int) -> None:
    problem = {"type": "urn:x", "title": "nope", "status": status, "detail": "no", "extra_member": 5}
    server = scripted([Answer(status, problem, {"retry-after": "0"}), Answer(200, {"tenant": "t", "admin": False})])
    try:
        with slotd.Client(server.url) as client:
            with pytest.raises(slotd.ApiError) as e:
                client.me()
        assert len(server.seen) == 1
        assert e.value.status == status
        assert e.value.extra == {"extra_member": 5}
        assert isinstance(e.value, slotd.ServerError) == (status >= 500)
    finally:
        server.close()


def test_a_retry_after_beyond_the_limit_is_raised_at_once() -> None:
    server = scripted([Answer(429, {"type": "urn:slotd:problem:rate-limited", "title": "Too many requests", "status": 429, "detail": "slow down"}, {"retry-after": "3600"})])
    try:
        with slotd.Client(server.url, max_retry_wait=10) as client:
            with pytest.raises(slotd.RateLimitedError) as e:
                client.me()
        assert len(server.seen) == 1 and e.value.retry_after == 3600
    finally:
        server.close()


def test_an_error_without_a_problem_document() -> None:
    server = scripted([Answer(502, None)])
    try:
        with slotd.Client(server.url) as client:
            with pytest.raises(slotd.ServerError) as e:
                client.me()
        assert e.value.status == 502 and e.value.type == "about:blank"
        assert "502" in e.value.detail
    finally:
        server.close()


def test_no_server_is_a_transport_error() -> None:
    with slotd.Client("http://127.0.0.1:9") as client:
        with pytest.raises(slotd.TransportError, match="GET http://127.0.0.1:9/v1/me"):
            client.me()
