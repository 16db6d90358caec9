"""Completion webhooks: verify what slotd POSTs to a task's ``callback_url``.

slotd signs each delivery by the `Standard Webhooks <https://www.standardwebhooks.com>`_ scheme
with ``[webhooks] secret`` (``whsec_`` + base64 key): headers ``webhook-id`` (the same on every
attempt of one delivery: deduplicate on it), ``webhook-timestamp`` (Unix seconds) and
``webhook-signature`` (``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, several
space-separated when keys rotate; any match passes). The body is
``{"type": "task.completed" | "task.failed" | "task.cancelled", "timestamp", "data": <task view>}``.

::

    from slotd import webhooks

    def receive(headers, body: bytes):
        try:
            event = webhooks.verify(SECRET, headers, body)
        except webhooks.WebhookVerificationError as e:
            return 400, str(e)
        if seen_before(headers["webhook-id"]):   # at least once: deduplicate
            return 204, ""
        record(event["data"]["task_id"], event["type"], event["data"]["status"])
        return 204, ""

Verify the raw bytes as received, before any JSON parsing or re-encoding.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, TypedDict, Union

from .errors import SlotdError
from .models import TaskView

__all__ = [
    "DEFAULT_TOLERANCE",
    "WebhookEvent",
    "WebhookVerificationError",
    "verify",
    "sign",
]

#: Seconds a timestamp may be from the receiver's clock, either way (the scheme's advice).
DEFAULT_TOLERANCE = 300


class WebhookEvent(TypedDict):
    """The body of a completion webhook (docs/api.md, "Completion webhooks")."""

    #: ``task.completed``, ``task.failed`` or ``task.cancelled``.
    type: Literal["task.completed", "task.failed", "task.cancelled"]
    #: When the task ended (as slotd writes it).
    timestamp: Any
    #: The task's view, as ``GET /v1/tasks/{id}`` shows it.
    data: TaskView


class WebhookVerificationError(SlotdError, ValueError):
    """The delivery is not to be trusted; ``reason`` says why in one word:

    - ``missing-header``: ``webhook-id``, ``webhook-timestamp`` or ``webhook-signature`` absent;
    - ``bad-timestamp``: the timestamp is not a whole number of seconds;
    - ``stale`` / ``future``: the timestamp is more than ``tolerance`` seconds in the past or
      ahead (a replay, or a clock far off);
    - ``bad-signature``: no ``v1`` signature matches (a forged or altered delivery, or the
      wrong secret);
    - ``bad-secret``: the secret given to :func:`verify` is not ``whsec_<base64>``;
    - ``bad-body``: signed correctly but not the JSON object slotd sends.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _HeaderLookup(Protocol):
    """Anything with ``get(name)``: ``http.server``'s and ``email``'s messages, framework
    headers objects."""

    def get(self, name: str, /) -> Any: ...


#: A request's headers: a mapping (any key case), an object with ``get``, or name/value pairs.
HeadersLike = Union[Mapping[str, str], _HeaderLookup, Iterable[tuple[str, str]]]


def _key(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        if not secret:
            raise WebhookVerificationError("bad-secret", "the webhook secret is empty")
        return secret
    if not secret.startswith("whsec_"):
        raise WebhookVerificationError(
            "bad-secret",
            "the webhook secret must be `whsec_` followed by base64 (as in slotd's "
            "[webhooks] secret); pass the raw key as bytes otherwise",
        )
    try:
        key = base64.b64decode(secret[len("whsec_") :], validate=True)
    except (binascii.Error, ValueError) as e:
        raise WebhookVerificationError(
            "bad-secret", f"the part of the webhook secret after `whsec_` is not base64: {e}"
        ) from None
    if not key:
        raise WebhookVerificationError("bad-secret", "the webhook secret is empty after `whsec_`")
    return key


def _header(headers: HeadersLike, name: str) -> str | None:
    """The value of ``name`` in any usual headers object, whatever the case of its keys."""
    get = getattr(headers, "get", None)
    if get is not None:
        # httpx.Headers, werkzeug/Django/Starlette headers and email.Message are case-insensitive.
        value = get(name)
        if value is not None:
            return str(value)
    items = getattr(headers, "items", None)
    if items is not None:
        pairs: Iterable[Any] = items()  # a plain dict: its keys may be in any case
    elif get is not None:
        return None  # a lookup object that said no
    else:
        pairs = headers  # type: ignore[assignment]
    for key, value in pairs:
        if str(key).lower() == name:
            return str(value)
    return None


def _signature(key: bytes, msg_id: str, timestamp: str, body: bytes) -> str:
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def sign(secret: str | bytes, msg_id: str, timestamp: int, body: bytes | str) -> str:
    """The ``webhook-signature`` value slotd sends for one message (for tests of receivers).

    >>> sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
    ...      1614265330, '{"test": 2432232314}')
    'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='
    """
    raw = body.encode() if isinstance(body, str) else body
    return "v1," + _signature(_key(secret), msg_id, str(int(timestamp)), raw)


def verify(
    secret: str | bytes,
    headers: HeadersLike,
    body: bytes | str,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> WebhookEvent:
    """Check a delivery's Standard Webhooks signature and timestamp; return its parsed body.

    Args:
        secret: ``[webhooks] secret`` of the slotd that sent it (``whsec_<base64>``), or the raw
            key as bytes.
        headers: the request's headers: a dict (any key case), ``httpx.Headers``, a framework's
            headers object, or ``(name, value)`` pairs.
        body: the raw request body, exactly as received.
        tolerance: seconds the timestamp may be away from ``now``, either way (default 300).
        now: the receiver's clock in Unix seconds (default ``time.time()``).

    Returns:
        The webhook's JSON body: ``{"type", "timestamp", "data": <task view>}``.

    Raises:
        WebhookVerificationError: with a ``reason`` (see the class) and a message naming the
            problem. Answer such a request 400 and do not act on it.

    Example::

        event = slotd.webhooks.verify("whsec_...", request.headers, request.body)
        print(event["type"], event["data"]["task_id"], event["data"]["status"])
    """
    key = _key(secret)
    raw = body.encode() if isinstance(body, str) else bytes(body)
    found = {
        name: _header(headers, name)
        for name in ("webhook-id", "webhook-timestamp", "webhook-signature")
    }
    missing = [name for name, value in found.items() if not value]
    if missing:
        raise WebhookVerificationError(
            "missing-header",
            f"the webhook has no {' and no '.join(missing)} header: not a signed slotd delivery",
        )
    msg_id = found["webhook-id"] or ""
    stamp = (found["webhook-timestamp"] or "").strip()
    signatures = found["webhook-signature"] or ""
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError(
            "bad-timestamp", f"webhook-timestamp {stamp!r} is not a whole number of seconds"
        ) from None
    clock = time.time() if now is None else now
    if timestamp < clock - tolerance:
        raise WebhookVerificationError(
            "stale",
            f"webhook-timestamp {timestamp} is {clock - timestamp:.0f} s old, more than the "
            f"{tolerance:g} s allowed: a replayed or long-delayed delivery",
        )
    if timestamp > clock + tolerance:
        raise WebhookVerificationError(
            "future",
            f"webhook-timestamp {timestamp} is {timestamp - clock:.0f} s ahead of this "
            f"clock, more than the {tolerance:g} s allowed",
        )
    expected = _signature(key, msg_id, stamp, raw).encode()
    offered = [
        part[len("v1,") :] for part in signatures.split() if part.startswith("v1,")
    ]
    if not offered:
        raise WebhookVerificationError(
            "bad-signature",
            f"webhook-signature {signatures[:80]!r} holds no v1 signature",
        )
    if not any(hmac.compare_digest(expected, sig.encode()) for sig in offered):
        raise WebhookVerificationError(
            "bad-signature",
            f"no webhook signature matches for webhook-id {msg_id!r}: the body or headers were "
            "altered, or it was signed with another secret",
        )
    try:
        event = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WebhookVerificationError("bad-body", f"the webhook body is not JSON: {e}") from None
    if not isinstance(event, dict) or "type" not in event or "data" not in event:
        raise WebhookVerificationError(
            "bad-body", "the webhook body is not a slotd event ({type, timestamp, data})"
        )
    return event  # type: ignore[return-value]
