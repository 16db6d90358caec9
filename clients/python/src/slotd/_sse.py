"""A server-sent events decoder (the WHATWG rules slotd's streams follow), fed line by line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StreamEvent:
    """One event of a live stream (:meth:`slotd.Client.watch`).

    Attributes:
        event: ``unit`` (a unit event; ``data`` is a :class:`slotd.models.UnitEvent`), ``end``
            (a task stream's last: ``data`` is ``{"task_id", "status"}``), or ``error`` (the
            server stopped the stream; the client reconnects and you do not see it).
        id: the resume cursor of a ``unit`` event (``Last-Event-ID``); ``None`` for the others.
        data: the event's JSON, decoded.
        raw: the ``data:`` text as received.
    """

    event: str
    id: str | None
    data: Any = field(compare=False)
    raw: str = ""

    @property
    def task_id(self) -> str | None:
        """The task the event is about (every ``unit`` and ``end`` event names one)."""
        if isinstance(self.data, dict):
            value = self.data.get("task_id")
            return str(value) if value is not None else None
        return None


class SSEDecoder:
    """Turns lines (without their line ends) into :class:`StreamEvent`\\ s. An event is
    dispatched only at the blank line that ends it, so a connection cut in the middle of one
    loses it whole and the resume cursor stays at the last complete event."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> StreamEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: slotd's keep-alive
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id = value
        # `retry` and unknown fields are ignored, as the standard says.
        return None

    def _dispatch(self) -> StreamEvent | None:
        event, data, event_id = self._event or "message", self._data, self._id
        self._event, self._data, self._id = "", [], None
        if not data:
            return None
        raw = "\n".join(data)
        try:
            decoded: Any = json.loads(raw)
        except json.JSONDecodeError:
            decoded = raw
        return StreamEvent(event=event, id=event_id or None, data=decoded, raw=raw)
