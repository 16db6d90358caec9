"""What each API call sends: built once here, sent by the sync and the async client alike."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from .models import DeadlinePolicy, RolloutAction, UnitStatus


@dataclass(frozen=True)
class Call:
    """One HTTP request of the API."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Safe to send again after a 503 whose request may have been worked on (a ``timeout``, or
    #: a 503 not from slotd). A 429, and a 503 ``overloaded`` or ``unavailable``, are retried
    #: whatever this says: slotd refused those before doing anything.
    idempotent: bool = True


def segment(value: str) -> str:
    """A path segment, escaped (task ids, handler and pool names)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string for a path segment, got {value!r}")
    return quote(value, safe="")


def rfc3339(value: datetime.datetime | str | None, name: str) -> str | None:
    """A deadline as slotd takes it: RFC 3339 text; a naive datetime is refused (ambiguous)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ValueError(
                f"{name} is a naive datetime; give it a timezone "
                "(e.g. datetime.now(timezone.utc) + timedelta(hours=1))"
            )
        return value.isoformat()
    raise TypeError(f"{name} must be a datetime or RFC 3339 text, not {type(value).__name__}")


def _params(**values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


def submit(
    task_type: str,
    payload: dict[str, Any],
    *,
    idempotency_key: str | None,
    priority: int | None,
    callback_url: str | None,
    deadline: datetime.datetime | str | None,
    start_by: datetime.datetime | str | None,
    deadline_policy: DeadlinePolicy | None,
) -> Call:
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a dict (the task type's JSON object), not {type(payload).__name__}")
    body: dict[str, Any] = {"payload": payload}
    optional = {
        "idempotency_key": idempotency_key,
        "priority": priority,
        "callback_url": callback_url,
        "deadline": rfc3339(deadline, "deadline"),
        "start_by": rfc3339(start_by, "start_by"),
        "deadline_policy": deadline_policy,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return Call(
        "POST",
        f"/v1/tasks/{segment(task_type)}",
        json=body,
        # With a key a repeat answers the same task; without one a repeat could make two.
        idempotent=idempotency_key is not None,
    )


def get(task_id: str, *, units: bool) -> Call:
    return Call("GET", f"/v1/tasks/{segment(task_id)}", params=_params(units=units or None))


def list_page(
    *,
    type: str | None,
    status: UnitStatus | None,
    tenant: str | None,
    limit: int | None,
    cursor: str | None,
) -> Call:
    return Call(
        "GET",
        "/v1/tasks",
        params=_params(type=type, status=status, tenant=tenant, limit=limit, cursor=cursor),
    )


def cancel(task_id: str) -> Call:
    return Call("POST", f"/v1/tasks/{segment(task_id)}/cancel")


def retry(task_id: str) -> Call:
    # Twice would retry again units that failed again in between: not blindly repeated.
    return Call("POST", f"/v1/tasks/{segment(task_id)}/retry", idempotent=False)


def task_events(task_id: str) -> Call:
    return Call("GET", f"/v1/tasks/{segment(task_id)}/events")


def tenant_events(*, after: str | None) -> Call:
    return Call("GET", "/v1/events", params=_params(after=after))


def stream_path(task_id: str | None) -> str:
    return "/v1/events" if task_id is None else f"/v1/tasks/{segment(task_id)}/events"


def task_webhooks(task_id: str) -> Call:
    return Call("GET", f"/v1/tasks/{segment(task_id)}/webhooks")


def list_webhooks(*, tenant: str | None, status: str | None, limit: int | None) -> Call:
    return Call("GET", "/v1/webhooks", params=_params(tenant=tenant, status=status, limit=limit))


def pools() -> Call:
    return Call("GET", "/v1/pools")


def pool_timeline(pool: str, *, minutes: int | None) -> Call:
    return Call("GET", f"/v1/pools/{segment(pool)}/timeline", params=_params(minutes=minutes))


def routes() -> Call:
    return Call("GET", "/v1/routes")


def handlers(*, all: bool) -> Call:
    return Call("GET", "/v1/handlers", params=_params(all=all or None))


def handler_history(*, name: str | None, limit: int | None) -> Call:
    return Call("GET", "/v1/handlers/history", params=_params(name=name, limit=limit))


def releases(*, name: str | None) -> Call:
    if name is None:
        return Call("GET", "/v1/handlers/releases")
    return Call("GET", f"/v1/handlers/{segment(name)}/releases")


def publish_handler(
    wasm: bytes,
    *,
    takes_over: bool | None,
    rollout: str | list[int] | None,
    min_units: int | None,
    margin: float | None,
) -> Call:
    if not isinstance(wasm, (bytes, bytearray)):
        raise TypeError("wasm must be the component file's bytes")
    stages = ",".join(str(s) for s in rollout) if isinstance(rollout, list) else rollout
    return Call(
        "POST",
        "/v1/handlers",
        params=_params(takes_over=takes_over, rollout=stages, min_units=min_units, margin=margin),
        content=bytes(wasm),
        headers={"content-type": "application/wasm"},
    )


def rollout(name: str, action: RolloutAction) -> Call:
    return Call(
        "POST", f"/v1/handlers/{segment(name)}/rollout", json={"action": action}, idempotent=False
    )


def set_budget(tenant: str, *, limit: float, period: str) -> Call:
    return Call(
        "PUT", f"/v1/tenants/{segment(tenant)}/budget", json={"limit": limit, "period": period}
    )


def usage(tenant: str) -> Call:
    return Call("GET", f"/v1/tenants/{segment(tenant)}/usage")


def me() -> Call:
    return Call("GET", "/v1/me")


def healthz() -> Call:
    return Call("GET", "/healthz")


def readyz() -> Call:
    return Call("GET", "/readyz")
