"""The exceptions the client raises.

Every error answer of slotd is ``application/problem+json`` (RFC 9457). It is raised as an
:class:`ApiError` subclass chosen by the HTTP status, carrying the problem's fields::

    try:
        client.submit("video", {"shots": []})
    except slotd.UnprocessableError as e:
        print(e.status, e.type, e.field, e.detail)
        # 422 urn:slotd:problem:validation shots the payload has no shots

Problem fields beyond the standard ones (slotd's ``field``, and any a later version adds) are
in :attr:`ApiError.extra` and, for ``field``, its own attribute.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = [
    "SlotdError",
    "ApiError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "UnprocessableError",
    "RateLimitedError",
    "ServerError",
    "UnavailableError",
    "TransportError",
    "StreamError",
    "WaitTimeout",
]


class SlotdError(Exception):
    """Base of every exception this package raises."""


class ApiError(SlotdError):
    """slotd answered with an error status.

    Attributes:
        status: the HTTP status (also the problem's ``status``).
        type: the problem type, a stable URN such as ``urn:slotd:problem:not-found``.
        title: the short human summary of the kind.
        detail: what went wrong with this request.
        field: the request field, query parameter or header at fault (validation problems),
            else ``None``.
        extra: every other member of the problem document.
        retry_after: seconds the server asked to wait (``Retry-After``), if it said.
        method, url: the request that failed.
        body: the problem document as received (a dict), or the raw text when the answer was
            not JSON.
    """

    status: int
    type: str
    title: str
    detail: str
    field: str | None
    extra: dict[str, Any]
    retry_after: float | None

    def __init__(
        self,
        *,
        status: int,
        type: str,
        title: str,
        detail: str,
        field: str | None = None,
        extra: dict[str, Any] | None = None,
        retry_after: float | None = None,
        method: str = "",
        url: str = "",
        body: Any = None,
    ) -> None:
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.field = field
        self.extra = dict(extra or {})
        self.retry_after = retry_after
        self.method = method
        self.url = url
        self.body = body
        super().__init__(self._message())

    def _message(self) -> str:
        where = f" ({self.method} {self.url})" if self.method else ""
        field = f" [field: {self.field}]" if self.field else ""
        return f"{self.status} {self.title}: {self.detail}{field}{where}"

    @property
    def problem(self) -> dict[str, Any]:
        """The problem document's members as one dict (standard ones, ``field`` and extras)."""
        doc: dict[str, Any] = {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.field is not None:
            doc["field"] = self.field
        doc.update(self.extra)
        return doc


class BadRequestError(ApiError):
    """400: the request is malformed (bad JSON, an unknown field, a wrong type); ``field`` names
    the culprit."""


class UnauthorizedError(ApiError):
    """401: no API key, or one slotd does not know."""


class ForbiddenError(ApiError):
    """403: the key may not do this (another tenant's list, an admin-only call)."""


class NotFoundError(ApiError):
    """404: no such task, task type or resource for this tenant (another tenant's task looks the
    same as none)."""


class ConflictError(ApiError):
    """409: the request contradicts what is stored."""


class PayloadTooLargeError(ApiError):
    """413: the body is over the server's ``max_body_bytes``."""


class UnprocessableError(ApiError):
    """422: well formed but refused: the handler's ``plan`` said no, or a value is out of
    range; ``field`` names the field when the refusal does."""


class RateLimitedError(ApiError):
    """429: the tenant's request rate limit is spent; raised once the client's retries (after
    ``Retry-After``) are used up."""


class ServerError(ApiError):
    """A 5xx answer."""


class UnavailableError(ServerError):
    """503: a dependency is down, the server is busy, or the request ran past its deadline;
    raised once the client's retries (after ``Retry-After``) are used up."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableError,
    429: RateLimitedError,
    503: UnavailableError,
}


class TransportError(SlotdError):
    """No answer from slotd: it could not be reached, the connection broke or a read timed
    out. The cause is chained (``__cause__``, an ``httpx`` exception)."""


class StreamError(SlotdError):
    """An event stream could not go on: the server ended it with ``event: error``, or it
    broke more times in a row than the client reconnects. ``last_event_id`` is where to
    resume."""

    def __init__(self, message: str, *, last_event_id: str | None = None) -> None:
        super().__init__(message)
        self.last_event_id = last_event_id


class WaitTimeout(SlotdError, TimeoutError):
    """:meth:`Client.wait` ran out of time before the task ended. ``task`` is the task's
    latest view (it is still running), when it could be read."""

    def __init__(self, message: str, *, task_id: str, task: Any = None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.task = task


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: whole seconds or an HTTP date (RFC 9110); ``None`` when
    absent or unreadable (a retry then waits the backoff)."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime
    import datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    now = datetime.datetime.now(datetime.timezone.utc)
    return max(0.0, (when - now).total_seconds())


def error_from_response(response: httpx.Response) -> ApiError:
    """The exception for an error ``response`` (its body already read)."""
    status = response.status_code
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    body: Any
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        body = response.text
    standard = {"type", "title", "status", "detail", "field"}
    if isinstance(body, dict):
        problem_type = str(body.get("type") or "about:blank")
        title = str(body.get("title") or response.reason_phrase or f"HTTP {status}")
        detail = str(body.get("detail") or "")
        field = body.get("field")
        extra = {k: v for k, v in body.items() if k not in standard}
    else:
        problem_type = "about:blank"
        title = response.reason_phrase or f"HTTP {status}"
        text = str(body).strip()
        detail = text[:500] if text else f"slotd answered {status} with no problem document"
        field = None
        extra = {}
    try:
        method, url = response.request.method, str(response.request.url)
    except RuntimeError:  # a response built by hand has no request
        method, url = "", ""
    return cls(
        status=status,
        type=problem_type,
        title=title,
        detail=detail,
        field=str(field) if field is not None else None,
        extra=extra,
        retry_after=retry_after_seconds(response.headers.get("retry-after")),
        method=method,
        url=url,
        body=body,
    )
