"""slotd: the Python client of slotd, the slot-based scheduler for AI video APIs.

::

    import slotd

    client = slotd.Client("http://127.0.0.1:8080", api_key="...")
    task = client.submit("video", {"shots": [{"prompt": "a cat on a wall"}]})
    view = client.wait(task["task_id"], timeout=600)

:class:`Client` (blocking) and :class:`AsyncClient` (asyncio) make every call of the API;
errors are raised as :class:`ApiError` subclasses carrying the problem+json fields;
:func:`slotd.webhooks.verify` checks a completion webhook; :mod:`slotd.models` types every
answer from the OpenAPI document.
"""

from . import models, webhooks
from ._sse import StreamEvent
from ._version import __version__
from .client import TERMINAL, AsyncClient, AsyncEventStream, Client, EventStream
from .errors import (
    ApiError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    ServerError,
    SlotdError,
    StreamError,
    TransportError,
    UnauthorizedError,
    UnavailableError,
    UnprocessableError,
    WaitTimeout,
)
from .webhooks import WebhookVerificationError

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "EventStream",
    "AsyncEventStream",
    "StreamEvent",
    "TERMINAL",
    "models",
    "webhooks",
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
    "WebhookVerificationError",
]
