"""The slotd API clients: :class:`Client` (blocking) and :class:`AsyncClient` (``asyncio``).

Both speak the same calls with the same arguments and return the same plain dicts (typed by
:mod:`slotd.models`)::

    import slotd

    with slotd.Client("http://127.0.0.1:8080", api_key="team-a-key") as client:
        task = client.submit("video", {"shots": [{"prompt": "a cat on a wall"}]},
                             idempotency_key="order-1234")
        view = client.wait(task["task_id"], timeout=600)
        print(view["status"], view["completed"], "/", view["total"])

Retries (docs/api.md, "Client retry policy"; the TypeScript client keeps the same one): a
``429``, and a ``503`` ``overloaded`` or ``unavailable``, are sent again after the
``Retry-After`` they carry (at most ``max_retries`` times, each wait at most ``max_retry_wait``
seconds), because slotd stores nothing for a request it refuses so. Any other ``503`` (a
``timeout``: the request ran past the server's deadline and may have been acted on; or a proxy's
``503``) is repeated only when that is safe: reads, ``PUT``, cancels, handler publishes, and
creates that carry an ``idempotency_key``; so a create without one is never sent twice. Nothing
else is retried; connection failures raise :class:`slotd.TransportError`. Live streams
(:meth:`Client.watch`) are the exception by design: they resume after a broken connection from
the last event received (``Last-Event-ID``), so nothing is missed or repeated.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from types import TracebackType
from typing import Any, Literal, cast, overload

import httpx

from . import _requests as req
from ._sse import SSEDecoder, StreamEvent
from ._version import __version__
from .errors import (
    ApiError,
    RateLimitedError,
    StreamError,
    TransportError,
    UnavailableError,
    WaitTimeout,
    error_from_response,
)
from .models import (
    Accepted,
    DeadlinePolicy,
    EventsPage,
    HandlerVersionRow,
    HandlerView,
    Me,
    PoolView,
    Probe,
    PublishedView,
    ReleaseList,
    Retried,
    Rollout,
    RolloutAction,
    RouteView,
    TaskEvents,
    TaskList,
    TaskSummary,
    TaskView,
    TaskWebhooks,
    TimelineView,
    UnitStatus,
    UsageView,
    VersionRecord,
    WebhookList,
)

__all__ = ["Client", "AsyncClient", "EventStream", "AsyncEventStream", "TERMINAL"]

#: Task statuses after which nothing more happens unless the task is retried.
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

DEFAULT_URL = "http://127.0.0.1:8080"
#: The 503 problem types slotd answers before doing anything with a request (nothing stored):
#: retried whatever the request. Any other 503 is retried only for an idempotent call.
_REFUSED_503 = frozenset({"urn:slotd:problem:overloaded", "urn:slotd:problem:unavailable"})
#: A stream idle this long (no event, no keep-alive comment; slotd sends one every 15 s) is
#: taken for a dead connection and resumed.
STREAM_IDLE_TIMEOUT = 45.0


def _backoff(attempt: int, base: float = 0.25, cap: float = 5.0) -> float:
    """The wait before retry ``attempt`` (from 1) of an answer without ``Retry-After``: 0.25 s
    doubling per retry, at most 5 s, jittered down to as little as half."""
    ceiling = min(cap, base * (2 ** (attempt - 1)))
    return float(ceiling / 2 + random.uniform(0, ceiling / 2))


class _Config:
    """What both clients share: where slotd is, how to authenticate, how to retry."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        max_retry_wait: float,
        max_reconnects: int,
    ) -> None:
        self.base_url = (base_url or os.environ.get("SLOTD_URL") or DEFAULT_URL).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {self.base_url!r}")
        self.api_key = api_key if api_key is not None else os.environ.get("SLOTD_API_KEY") or None
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if max_reconnects < 0:
            raise ValueError("max_reconnects must be 0 or more")
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.max_reconnects = max_reconnects

    def headers(self) -> dict[str, str]:
        headers = {"user-agent": f"slotd-python/{__version__}", "accept": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def retry_wait(self, error: ApiError, call: req.Call, attempt: int) -> float | None:
        """Seconds to wait before sending ``call`` again after ``error``, or ``None`` to raise
        it. ``attempt`` counts the retries already made."""
        if attempt >= self.max_retries:
            return None
        if isinstance(error, RateLimitedError):
            pass
        elif isinstance(error, UnavailableError):
            if error.type not in _REFUSED_503 and not call.idempotent:
                return None
        else:
            return None
        wait = error.retry_after if error.retry_after is not None else _backoff(attempt + 1)
        if wait > self.max_retry_wait:
            return None
        return wait


def _stream_timeout(default: float, deadline: float | None) -> httpx.Timeout:
    read = STREAM_IDLE_TIMEOUT
    if deadline is not None:
        read = max(0.001, min(read, deadline - time.monotonic()))
    return httpx.Timeout(default, read=read)


class _DeadlineReached(Exception):
    pass


def _transport_error(call: req.Call, base_url: str, error: Exception) -> TransportError:
    kind = type(error).__name__
    return TransportError(f"{call.method} {base_url}{call.path}: {kind}: {error or 'no detail'}")


def _reconnect_message(path: str, reason: str, failures: int, last_id: str | None) -> str:
    return (
        f"the event stream {path} broke {failures} times in a row (last: {reason}); "
        f"resume with last_event_id={last_id!r}"
    )


# ---------------------------------------------------------------------------------------------
# The blocking client
# ---------------------------------------------------------------------------------------------


class EventStream:
    """A live event stream (:meth:`Client.watch`): iterate it for :class:`StreamEvent`\\ s.

    It resumes by itself after a broken connection, from the last event it yielded
    (``Last-Event-ID``), so each event comes once and in order. A task's stream ends after its
    ``end`` event; the tenant's stream (``task_id=None``) runs until you stop. Use it as a
    context manager (or call :meth:`close`) to release the connection early.

    ``last_event_id`` is the cursor of the last event yielded: give it to a later
    ``watch(..., last_event_id=...)`` to go on from there. ``connections`` counts the HTTP
    requests made (1 plus the reconnections).
    """

    def __init__(
        self,
        client: Client,
        task_id: str | None,
        last_event_id: str | None,
        deadline: float | None = None,
    ) -> None:
        self._client = client
        self._path = req.stream_path(task_id)
        self._task = task_id
        self.last_event_id = last_event_id
        self.connections = 0
        self._deadline = deadline
        self._response: httpx.Response | None = None
        self._closed = False
        self._iter = self._events()

    def __iter__(self) -> Iterator[StreamEvent]:
        return self._iter

    def __next__(self) -> StreamEvent:
        return next(self._iter)

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the stream and release its connection (also from another thread than the one
        iterating: that one then stops at its next read)."""
        self._closed = True
        if self._response is not None:
            self._response.close()
        try:
            self._iter.close()
        except ValueError:  # "generator already executing": iterated in another thread
            pass

    def _events(self) -> Generator[StreamEvent, None, None]:
        cfg = self._client._cfg
        failures = 0
        while not self._closed:
            headers = {"accept": "text/event-stream"}
            if self.last_event_id:
                headers["last-event-id"] = self.last_event_id
            call = req.Call("GET", self._path, headers=headers)
            reason = ""
            try:
                self.connections += 1
                response = self._client._send(call, stream=True, deadline=self._deadline)
                self._response = response
                try:
                    decoder = SSEDecoder()
                    for line in response.iter_lines():
                        event = decoder.feed(line)
                        if event is None:
                            continue
                        if event.event == "error":
                            message = event.data.get("message") if isinstance(event.data, dict) else event.raw
                            reason = f"the server ended it: {message}"
                            break
                        if event.id is not None:
                            self.last_event_id = event.id
                        failures = 0
                        yield event
                        if event.event == "end":
                            return
                    else:
                        reason = "the server closed it before the task's end"
                finally:
                    response.close()
                    self._response = None
            except httpx.TimeoutException as e:
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    raise _DeadlineReached() from e
                reason = f"no data for {STREAM_IDLE_TIMEOUT:g} s ({type(e).__name__})"
            except (httpx.TransportError, httpx.StreamError) as e:
                reason = f"{type(e).__name__}: {e}"
            except TransportError as e:
                reason = str(e)
            if self._closed:
                return
            failures += 1
            if failures > cfg.max_reconnects:
                raise StreamError(
                    _reconnect_message(self._path, reason, failures, self.last_event_id),
                    last_event_id=self.last_event_id,
                )
            pause = _backoff(failures, base=0.1)
            if self._deadline is not None and time.monotonic() + pause >= self._deadline:
                raise _DeadlineReached()
            time.sleep(pause)


class Client:
    """A blocking client of slotd's API, on ``httpx``.

    Args:
        base_url: where slotd listens (default ``$SLOTD_URL``, else ``http://127.0.0.1:8080``).
        api_key: a key of ``[[api_keys]]``, sent as ``Authorization: Bearer`` (default
            ``$SLOTD_API_KEY``; none for a loopback slotd without keys).
        timeout: seconds for connecting and for each read of an ordinary call.
        max_retries: how many times a ``429``/``503`` is sent again after its ``Retry-After``.
        max_retry_wait: the longest ``Retry-After`` honoured; a longer one is raised at once.
        max_reconnects: how many broken connections in a row a live stream survives.
        http_client: an ``httpx.Client`` of your own (proxies, TLS, event hooks); the client
            does not close it.

    Example::

        client = slotd.Client("http://127.0.0.1:8080", api_key=os.environ["SLOTD_API_KEY"])
        print(client.me())          # {'tenant': 'team-a', 'admin': False}
        client.close()
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        max_reconnects: int = 10,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._cfg = _Config(base_url, api_key, timeout, max_retries, max_retry_wait, max_reconnects)
        self._own_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)

    @property
    def base_url(self) -> str:
        """The slotd this client talks to."""
        return self._cfg.base_url

    def close(self) -> None:
        """Close the connections (unless the ``httpx.Client`` was given)."""
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- transport ----------------------------------------------------------------------------

    def _send(
        self, call: req.Call, *, stream: bool = False, deadline: float | None = None
    ) -> httpx.Response:
        """Send ``call``, retrying 429/503 as the class says; an error status raises."""
        headers = {**self._cfg.headers(), **call.headers}
        attempt = 0
        while True:
            timeout = _stream_timeout(self._cfg.timeout, deadline) if stream else self._cfg.timeout
            request = self._http.build_request(
                call.method,
                self._cfg.base_url + call.path,
                params=call.params or None,
                json=call.json,
                content=call.content,
                headers=headers,
                timeout=timeout,
            )
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TimeoutException as e:
                if stream:
                    raise
                raise _transport_error(call, self._cfg.base_url, e) from e
            except httpx.TransportError as e:
                raise _transport_error(call, self._cfg.base_url, e) from e
            if response.status_code < 400:
                return response
            response.read()
            response.close()
            error = error_from_response(response)
            wait = self._cfg.retry_wait(error, call, attempt)
            if wait is None:
                raise error
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise _DeadlineReached() from error
            time.sleep(wait)
            attempt += 1

    def _json(self, call: req.Call) -> Any:
        response = self._send(call)
        return response.json() if response.content else None

    # -- tasks --------------------------------------------------------------------------------

    def submit(
        self,
        task_type: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        callback_url: str | None = None,
        deadline: datetime.datetime | str | None = None,
        start_by: datetime.datetime | str | None = None,
        deadline_policy: DeadlinePolicy | None = None,
    ) -> Accepted:
        """Create a task: ``POST /v1/tasks/{task_type}``. The handler serving the type plans the
        payload into units (or refuses it: :class:`UnprocessableError` naming the field).

        Args:
            task_type: a type a loaded handler serves (``video``, ``avatar_clone``, …) or a
                route (``clip``).
            payload: the task type's own JSON object.
            idempotency_key: a repeat with the same key (per tenant) answers the task it made.
                With a key, a create is also safely retried after any ``503``.
            priority: -1000 to 1000, higher first within the tenant's fair share (default 0).
            callback_url: where the completion webhook goes (:mod:`slotd.webhooks`).
            deadline, start_by: complete (or be submitted) by then: an aware ``datetime`` or
                RFC 3339 text.
            deadline_policy: ``refuse`` (default) or ``best_effort``.

        Returns:
            ``{"task_id", "status"}``.

        Example::

            task = client.submit(
                "video",
                {"model_name": "kling-v1-6", "shots": [{"prompt": "a cat on a wall"}]},
                idempotency_key="order-1234",
                priority=10,
                callback_url="https://example.com/hooks/slotd",
            )
            print(task["task_id"], task["status"])    # ... pending
        """
        call = req.submit(
            task_type,
            payload,
            idempotency_key=idempotency_key,
            priority=priority,
            callback_url=callback_url,
            deadline=deadline,
            start_by=start_by,
            deadline_policy=deadline_policy,
        )
        return cast(Accepted, self._json(call))

    def get(self, task_id: str, *, units: bool = False) -> TaskView:
        """A task's view: ``GET /v1/tasks/{id}`` (``units=True`` adds the unit records).

        Example::

            view = client.get(task_id)
            print(view["status"], view["message"])    # running 3/12 completed, 2 running, 7 waiting
            for result in view["results"]:
                print(result["index"], result["status"], result.get("object_key"))
        """
        return cast(TaskView, self._json(req.get(task_id, units=units)))

    def list_page(
        self,
        *,
        type: str | None = None,
        status: UnitStatus | None = None,
        tenant: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskList:
        """One page of tasks, newest first: ``GET /v1/tasks``. Pass ``next_cursor`` of a page
        as ``cursor`` for the next; :meth:`list_tasks` does that for you.

        Example::

            page = client.list_page(type="video", limit=20)
            print(len(page["tasks"]), page.get("next_cursor"))
        """
        call = req.list_page(type=type, status=status, tenant=tenant, limit=limit, cursor=cursor)
        return cast(TaskList, self._json(call))

    def list_tasks(
        self,
        *,
        type: str | None = None,
        status: UnitStatus | None = None,
        tenant: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[TaskSummary]:
        """Every task, newest first, fetched page by page as you iterate (cursor paging).

        Args:
            type: only tasks of this type.
            status: only tasks with a unit in this status.
            tenant: another tenant's tasks (an admin key; all tenants' when absent for one).
            page_size: tasks per request (1–500, default 50).

        Example::

            for task in client.list_tasks(type="video", status="failed"):
                print(task["task_id"], task["message"])
        """
        cursor: str | None = None
        while True:
            page = self.list_page(type=type, status=status, tenant=tenant, limit=page_size, cursor=cursor)
            yield from page["tasks"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def cancel(self, task_id: str) -> TaskView:
        """Cancel every unfinished unit: ``POST /v1/tasks/{id}/cancel``. Units at the provider
        keep their slot until their job ends (``cancel_requested`` is true meanwhile).

        Example::

            view = client.cancel(task_id)
            print(view["cancel_requested"], view["status"])   # True cancelled
        """
        return cast(TaskView, self._json(req.cancel(task_id)))

    def retry(self, task_id: str) -> Retried:
        """Resubmit the task's failed units (and store again units whose storing gave up):
        ``POST /v1/tasks/{id}/retry``. Completed units are left as they are.

        Example::

            print(client.retry(task_id)["retried"])    # 3
        """
        return cast(Retried, self._json(req.retry(task_id)))

    def events(self, task_id: str) -> TaskEvents:
        """The task's unit event log, oldest first: ``GET /v1/tasks/{id}/events``.

        Example::

            for e in client.events(task_id)["events"]:
                print(e["unit_id"], e["from_status"], "->", e["to_status"], e.get("detail"))
        """
        return cast(TaskEvents, self._json(req.task_events(task_id)))

    def tenant_events(self, *, after: str | None = None) -> EventsPage:
        """One page of the tenant's event log: ``GET /v1/events?after=``; pass ``next`` of a
        page as ``after`` for the following events.

        Example::

            page = client.tenant_events()
            page = client.tenant_events(after=page["next"])
        """
        return cast(EventsPage, self._json(req.tenant_events(after=after)))

    def watch(self, task_id: str | None = None, *, last_event_id: str | None = None) -> EventStream:
        """The live event stream of a task (from its first event; ends after its ``end``
        event) or, with no ``task_id``, of the whole tenant (from now on; endless).

        The stream resumes by itself after a broken connection with ``Last-Event-ID`` (at most
        ``max_reconnects`` failures in a row), so every event comes once, in order.

        Example::

            with client.watch(task_id) as stream:
                for event in stream:
                    if event.event == "unit":
                        print(event.data["unit_id"], event.data["to_status"])
                    else:                                 # "end"
                        print("task ended", event.data["status"])
        """
        return EventStream(self, task_id, last_event_id)

    def wait(self, task_id: str, *, timeout: float | None = None) -> TaskView:
        """Block until the task ends (completed, failed or cancelled), following its live
        stream rather than polling, and return its final view.

        Raises:
            WaitTimeout: ``timeout`` seconds went by first (the task goes on; ``e.task`` is its
                latest view).

        Example::

            view = client.wait(task_id, timeout=600)
            if view["status"] != "completed":
                print(view["error"])
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            view = self.get(task_id)
            if view["status"] in TERMINAL:
                return view
            stream = EventStream(self, task_id, None, deadline=deadline)
            with stream:
                for event in stream:
                    if event.event == "end":
                        break
            return self.get(task_id)
        except _DeadlineReached:
            pass
        latest: TaskView | None = None
        try:
            latest = self.get(task_id)
        except (ApiError, TransportError):
            pass
        raise WaitTimeout(
            f"task {task_id} did not end within {timeout:g} s"
            + (f" (now {latest['status']}: {latest['message']})" if latest else ""),
            task_id=task_id,
            task=latest,
        )

    def webhooks(self, task_id: str) -> TaskWebhooks:
        """The task's completion webhook deliveries and every attempt:
        ``GET /v1/tasks/{id}/webhooks``.

        Example::

            for d in client.webhooks(task_id)["deliveries"]:
                print(d["id"], d["status"], [a.get("status") for a in d["attempts"]])
        """
        return cast(TaskWebhooks, self._json(req.task_webhooks(task_id)))

    def list_webhooks(
        self,
        *,
        tenant: str | None = None,
        status: Literal["pending", "delivered", "failed"] | None = None,
        limit: int | None = None,
    ) -> WebhookList:
        """Completion webhook deliveries across tasks, newest first: ``GET /v1/webhooks``.

        Example::

            for d in client.list_webhooks(status="failed")["deliveries"]:
                print(d["task_id"], d["url"], d.get("last_error"))
        """
        return cast(WebhookList, self._json(req.list_webhooks(tenant=tenant, status=status, limit=limit)))

    # -- pools, routes, handlers --------------------------------------------------------------

    def pools(self) -> list[PoolView]:
        """Every pool: slots used and maximum, per provider account, quotas, spend:
        ``GET /v1/pools``.

        Example::

            for p in client.pools():
                print(p["name"], p.get("used"), "/", p.get("max_slots"), p["units"])
        """
        return cast("list[PoolView]", self._json(req.pools()))

    def pool_timeline(self, pool: str, *, minutes: int | None = None) -> TimelineView:
        """A pool's slot occupancy over the last ``minutes`` (1–60, default 10):
        ``GET /v1/pools/{pool}/timeline``.

        Example::

            t = client.pool_timeline("kling:video", minutes=5)
            print(len(t["intervals"]), t["latency"])
        """
        return cast(TimelineView, self._json(req.pool_timeline(pool, minutes=minutes)))

    def routes(self) -> list[RouteView]:
        """Each route with its targets' room and recent refusals: ``GET /v1/routes``.

        Example::

            for r in client.routes():
                print(r["name"], r["policy"], [(t["handler"], t["free"]) for t in r["targets"]])
        """
        return cast("list[RouteView]", self._json(req.routes()))

    @overload
    def handlers(self, *, all: Literal[False] = False) -> list[HandlerView]: ...
    @overload
    def handlers(self, *, all: Literal[True]) -> list[VersionRecord]: ...
    def handlers(self, *, all: bool = False) -> list[HandlerView] | list[VersionRecord]:
        """The loaded handlers and their task types and pools: ``GET /v1/handlers``; with
        ``all=True`` every version seen, refused and quarantined ones with the reason.

        Example::

            for h in client.handlers():
                print(h["name"], h["version"], [t["name"] for t in h["task_types"]])
        """
        return cast("list[HandlerView]", self._json(req.handlers(all=all)))

    def handler_history(self, *, name: str | None = None, limit: int | None = None) -> list[HandlerVersionRow]:
        """The durable handler version history, newest first: ``GET /v1/handlers/history``.

        Example::

            for row in client.handler_history(name="kling-video", limit=10):
                print(row["at"], row.get("version"), row["state"])
        """
        return cast("list[HandlerVersionRow]", self._json(req.handler_history(name=name, limit=limit)))

    def releases(self, name: str | None = None) -> ReleaseList:
        """Handler releases (newest first), each process's word on them, and the rollouts:
        ``GET /v1/handlers/releases`` or, for one handler, ``GET /v1/handlers/{name}/releases``.

        Example::

            for r in client.releases("kling-video")["releases"]:
                print(r["version"], r["sha256"][:12], r["current"])
        """
        return cast(ReleaseList, self._json(req.releases(name=name)))

    def publish_handler(
        self,
        wasm: bytes,
        *,
        takes_over: bool | None = None,
        rollout: str | list[int] | None = None,
        min_units: int | None = None,
        margin: float | None = None,
    ) -> PublishedView:
        """Publish a handler component as a release every process runs: ``POST /v1/handlers``
        (an admin key, or one allowed to publish that handler). ``published`` is ``new``, or
        ``already`` for a file published before (made current again).

        Example::

            with open("my_provider.wasm", "rb") as f:
                print(client.publish_handler(f.read(), rollout=[10, 50, 100])["published"])
        """
        call = req.publish_handler(wasm, takes_over=takes_over, rollout=rollout, min_units=min_units, margin=margin)
        return cast(PublishedView, self._json(call))

    def rollout(self, name: str, action: RolloutAction) -> Rollout:
        """Act on a handler's rollout in progress (``promote``, ``rollback``, ``pause``,
        ``resume``): ``POST /v1/handlers/{name}/rollout``.

        Example::

            print(client.rollout("kling-video", "pause")["state"])     # paused
        """
        return cast(Rollout, self._json(req.rollout(name, action)))

    # -- tenants ------------------------------------------------------------------------------

    def set_budget(self, tenant: str, *, limit: float, period: str) -> UsageView:
        """Set a tenant's budget (an admin key): ``PUT /v1/tenants/{name}/budget``; ``period``
        like ``"1h"``, ``"1d"``, ``"30d"``.

        Example::

            usage = admin.set_budget("team-a", limit=500.0, period="1d")
            print(usage["budget"]["limit"], usage["remaining"])
        """
        return cast(UsageView, self._json(req.set_budget(tenant, limit=limit, period=period)))

    def usage(self, tenant: str) -> UsageView:
        """A tenant's budget and spending: ``GET /v1/tenants/{name}/usage``.

        Example::

            u = client.usage("team-a")
            print(u["total_cost"], u.get("remaining"))
        """
        return cast(UsageView, self._json(req.usage(tenant)))

    def me(self) -> Me:
        """Who the key acts for: ``GET /v1/me``.

        Example::

            print(client.me())      # {'tenant': 'team-a', 'admin': False}
        """
        return cast(Me, self._json(req.me()))

    def health(self) -> Probe:
        """Liveness: ``GET /healthz`` (``{"status": "ok"}``).

        Example::

            assert client.health()["status"] == "ok"
        """
        return cast(Probe, self._json(req.healthz()))

    def ready(self) -> Probe:
        """Readiness (the database answers): ``GET /readyz``; a 503 while it does not is
        retried like any 503, then raised as :class:`UnavailableError`.

        Example::

            assert client.ready()["status"] == "ready"
        """
        return cast(Probe, self._json(req.readyz()))


# ---------------------------------------------------------------------------------------------
# The asyncio client
# ---------------------------------------------------------------------------------------------


class AsyncEventStream:
    """:class:`EventStream` for :class:`AsyncClient`: ``async for event in stream``, and
    ``async with`` (or ``await stream.aclose()``) to stop early."""

    def __init__(self, client: AsyncClient, task_id: str | None, last_event_id: str | None) -> None:
        self._client = client
        self._path = req.stream_path(task_id)
        self.last_event_id = last_event_id
        self.connections = 0
        self._closed = False
        self._iter = self._events()

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._iter

    async def __anext__(self) -> StreamEvent:
        return await self._iter.__anext__()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the stream and release its connection."""
        self._closed = True
        await self._iter.aclose()

    async def _events(self) -> AsyncGenerator[StreamEvent, None]:
        cfg = self._client._cfg
        failures = 0
        while not self._closed:
            headers = {"accept": "text/event-stream"}
            if self.last_event_id:
                headers["last-event-id"] = self.last_event_id
            call = req.Call("GET", self._path, headers=headers)
            reason = ""
            try:
                self.connections += 1
                response = await self._client._send(call, stream=True)
                try:
                    decoder = SSEDecoder()
                    ended_by_server = True
                    async for line in response.aiter_lines():
                        event = decoder.feed(line)
                        if event is None:
                            continue
                        if event.event == "error":
                            message = event.data.get("message") if isinstance(event.data, dict) else event.raw
                            reason = f"the server ended it: {message}"
                            ended_by_server = False
                            break
                        if event.id is not None:
                            self.last_event_id = event.id
                        failures = 0
                        yield event
                        if event.event == "end":
                            return
                    if ended_by_server:
                        reason = "the server closed it before the task's end"
                finally:
                    await response.aclose()
            except httpx.TimeoutException as e:
                reason = f"no data for {STREAM_IDLE_TIMEOUT:g} s ({type(e).__name__})"
            except (httpx.TransportError, httpx.StreamError) as e:
                reason = f"{type(e).__name__}: {e}"
            except TransportError as e:
                reason = str(e)
            if self._closed:
                return
            failures += 1
            if failures > cfg.max_reconnects:
                raise StreamError(
                    _reconnect_message(self._path, reason, failures, self.last_event_id),
                    last_event_id=self.last_event_id,
                )
            await asyncio.sleep(_backoff(failures, base=0.1))


class AsyncClient:
    """The ``asyncio`` client: every call of :class:`Client`, awaited.

    Example::

        async with slotd.AsyncClient("http://127.0.0.1:8080", api_key=KEY) as client:
            task = await client.submit("video", payload, idempotency_key="order-1234")
            view = await client.wait(task["task_id"], timeout=600)
            async for t in client.list_tasks(type="video"):
                print(t["task_id"], t["status"])
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        max_reconnects: int = 10,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._cfg = _Config(base_url, api_key, timeout, max_retries, max_retry_wait, max_reconnects)
        self._own_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)

    @property
    def base_url(self) -> str:
        """The slotd this client talks to."""
        return self._cfg.base_url

    async def aclose(self) -> None:
        """Close the connections (unless the ``httpx.AsyncClient`` was given)."""
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(self, call: req.Call, *, stream: bool = False) -> httpx.Response:
        headers = {**self._cfg.headers(), **call.headers}
        attempt = 0
        while True:
            timeout = _stream_timeout(self._cfg.timeout, None) if stream else self._cfg.timeout
            request = self._http.build_request(
                call.method,
                self._cfg.base_url + call.path,
                params=call.params or None,
                json=call.json,
                content=call.content,
                headers=headers,
                timeout=timeout,
            )
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TimeoutException as e:
                if stream:
                    raise
                raise _transport_error(call, self._cfg.base_url, e) from e
            except httpx.TransportError as e:
                raise _transport_error(call, self._cfg.base_url, e) from e
            if response.status_code < 400:
                return response
            await response.aread()
            await response.aclose()
            error = error_from_response(response)
            wait = self._cfg.retry_wait(error, call, attempt)
            if wait is None:
                raise error
            await asyncio.sleep(wait)
            attempt += 1

    async def _json(self, call: req.Call) -> Any:
        response = await self._send(call)
        return response.json() if response.content else None

    async def submit(
        self,
        task_type: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        callback_url: str | None = None,
        deadline: datetime.datetime | str | None = None,
        start_by: datetime.datetime | str | None = None,
        deadline_policy: DeadlinePolicy | None = None,
    ) -> Accepted:
        """:meth:`Client.submit`, awaited.

        Example::

            task = await client.submit("video", payload, idempotency_key="order-1234")
        """
        call = req.submit(
            task_type,
            payload,
            idempotency_key=idempotency_key,
            priority=priority,
            callback_url=callback_url,
            deadline=deadline,
            start_by=start_by,
            deadline_policy=deadline_policy,
        )
        return cast(Accepted, await self._json(call))

    async def get(self, task_id: str, *, units: bool = False) -> TaskView:
        """:meth:`Client.get`, awaited: ``view = await client.get(task_id)``."""
        return cast(TaskView, await self._json(req.get(task_id, units=units)))

    async def list_page(
        self,
        *,
        type: str | None = None,
        status: UnitStatus | None = None,
        tenant: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskList:
        """:meth:`Client.list_page`, awaited: ``page = await client.list_page(limit=20)``."""
        call = req.list_page(type=type, status=status, tenant=tenant, limit=limit, cursor=cursor)
        return cast(TaskList, await self._json(call))

    async def list_tasks(
        self,
        *,
        type: str | None = None,
        status: UnitStatus | None = None,
        tenant: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[TaskSummary]:
        """:meth:`Client.list_tasks` as an async iterator.

        Example::

            async for task in client.list_tasks(type="video"):
                print(task["task_id"])
        """
        cursor: str | None = None
        while True:
            page = await self.list_page(type=type, status=status, tenant=tenant, limit=page_size, cursor=cursor)
            for task in page["tasks"]:
                yield task
            cursor = page.get("next_cursor")
            if not cursor:
                return

    async def cancel(self, task_id: str) -> TaskView:
        """:meth:`Client.cancel`, awaited: ``view = await client.cancel(task_id)``."""
        return cast(TaskView, await self._json(req.cancel(task_id)))

    async def retry(self, task_id: str) -> Retried:
        """:meth:`Client.retry`, awaited: ``n = (await client.retry(task_id))["retried"]``."""
        return cast(Retried, await self._json(req.retry(task_id)))

    async def events(self, task_id: str) -> TaskEvents:
        """:meth:`Client.events`, awaited: ``log = (await client.events(task_id))["events"]``."""
        return cast(TaskEvents, await self._json(req.task_events(task_id)))

    async def tenant_events(self, *, after: str | None = None) -> EventsPage:
        """:meth:`Client.tenant_events`, awaited: ``page = await client.tenant_events()``."""
        return cast(EventsPage, await self._json(req.tenant_events(after=after)))

    def watch(self, task_id: str | None = None, *, last_event_id: str | None = None) -> AsyncEventStream:
        """:meth:`Client.watch` as an async iterator (not awaited itself).

        Example::

            async with client.watch(task_id) as stream:
                async for event in stream:
                    print(event.event, event.data)
        """
        return AsyncEventStream(self, task_id, last_event_id)

    async def wait(self, task_id: str, *, timeout: float | None = None) -> TaskView:
        """:meth:`Client.wait`, awaited: ``view = await client.wait(task_id, timeout=600)``.

        Raises:
            WaitTimeout: ``timeout`` seconds went by before the task ended.
        """
        try:
            async with asyncio.timeout(timeout):
                view = await self.get(task_id)
                if view["status"] in TERMINAL:
                    return view
                async with self.watch(task_id) as stream:
                    async for event in stream:
                        if event.event == "end":
                            break
                return await self.get(task_id)
        except TimeoutError:
            pass
        latest: TaskView | None = None
        try:
            latest = await self.get(task_id)
        except (ApiError, TransportError):
            pass
        raise WaitTimeout(
            f"task {task_id} did not end within {timeout:g} s"
            + (f" (now {latest['status']}: {latest['message']})" if latest else ""),
            task_id=task_id,
            task=latest,
        )

    async def webhooks(self, task_id: str) -> TaskWebhooks:
        """:meth:`Client.webhooks`, awaited: ``d = (await client.webhooks(task_id))["deliveries"]``."""
        return cast(TaskWebhooks, await self._json(req.task_webhooks(task_id)))

    async def list_webhooks(
        self,
        *,
        tenant: str | None = None,
        status: Literal["pending", "delivered", "failed"] | None = None,
        limit: int | None = None,
    ) -> WebhookList:
        """:meth:`Client.list_webhooks`, awaited: ``await client.list_webhooks(status="failed")``."""
        return cast(WebhookList, await self._json(req.list_webhooks(tenant=tenant, status=status, limit=limit)))

    async def pools(self) -> list[PoolView]:
        """:meth:`Client.pools`, awaited: ``for p in await client.pools(): ...``."""
        return cast("list[PoolView]", await self._json(req.pools()))

    async def pool_timeline(self, pool: str, *, minutes: int | None = None) -> TimelineView:
        """:meth:`Client.pool_timeline`, awaited: ``await client.pool_timeline("kling:video")``."""
        return cast(TimelineView, await self._json(req.pool_timeline(pool, minutes=minutes)))

    async def routes(self) -> list[RouteView]:
        """:meth:`Client.routes`, awaited: ``for r in await client.routes(): ...``."""
        return cast("list[RouteView]", await self._json(req.routes()))

    @overload
    async def handlers(self, *, all: Literal[False] = False) -> list[HandlerView]: ...
    @overload
    async def handlers(self, *, all: Literal[True]) -> list[VersionRecord]: ...
    async def handlers(self, *, all: bool = False) -> list[HandlerView] | list[VersionRecord]:
        """:meth:`Client.handlers`, awaited: ``for h in await client.handlers(): ...``."""
        return cast("list[HandlerView]", await self._json(req.handlers(all=all)))

    async def handler_history(self, *, name: str | None = None, limit: int | None = None) -> list[HandlerVersionRow]:
        """:meth:`Client.handler_history`, awaited: ``await client.handler_history(limit=10)``."""
        return cast("list[HandlerVersionRow]", await self._json(req.handler_history(name=name, limit=limit)))

    async def releases(self, name: str | None = None) -> ReleaseList:
        """:meth:`Client.releases`, awaited: ``await client.releases("kling-video")``."""
        return cast(ReleaseList, await self._json(req.releases(name=name)))

    async def publish_handler(
        self,
        wasm: bytes,
        *,
        takes_over: bool | None = None,
        rollout: str | list[int] | None = None,
        min_units: int | None = None,
        margin: float | None = None,
    ) -> PublishedView:
        """:meth:`Client.publish_handler`, awaited: ``await client.publish_handler(data)``."""
        call = req.publish_handler(wasm, takes_over=takes_over, rollout=rollout, min_units=min_units, margin=margin)
        return cast(PublishedView, await self._json(call))

    async def rollout(self, name: str, action: RolloutAction) -> Rollout:
        """:meth:`Client.rollout`, awaited: ``await client.rollout("kling-video", "promote")``."""
        return cast(Rollout, await self._json(req.rollout(name, action)))

    async def set_budget(self, tenant: str, *, limit: float, period: str) -> UsageView:
        """:meth:`Client.set_budget`, awaited: ``await admin.set_budget("team-a", limit=500, period="1d")``."""
        return cast(UsageView, await self._json(req.set_budget(tenant, limit=limit, period=period)))

    async def usage(self, tenant: str) -> UsageView:
        """:meth:`Client.usage`, awaited: ``await client.usage("team-a")``."""
        return cast(UsageView, await self._json(req.usage(tenant)))

    async def me(self) -> Me:
        """:meth:`Client.me`, awaited: ``await client.me()``."""
        return cast(Me, await self._json(req.me()))

    async def health(self) -> Probe:
        """:meth:`Client.health`, awaited: ``await client.health()``."""
        return cast(Probe, await self._json(req.healthz()))

    async def ready(self) -> Probe:
        """:meth:`Client.ready`, awaited: ``await client.ready()``."""
        return cast(Probe, await self._json(req.readyz()))

