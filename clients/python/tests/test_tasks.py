"""Tasks against the live slotd: submit (with its options), get, list with cursor paging,
cancel, retry, the event log, and the tenant's event pages."""

from __future__ import annotations

import datetime
import uuid

import httpx
import pytest

import slotd
from conftest import Live


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_submit_then_get_until_completed_with_results(client: slotd.Client) -> None:
    accepted = client.submit("fixture", {"count": 3, "polls": 1})
    assert accepted["status"] == "pending"
    task_id = accepted["task_id"]
    view = client.get(task_id)
    assert view["task_id"] == task_id
    assert view["type"] == "fixture"
    assert view["total"] == 3
    assert view["tenant"] == "team-a"
    final = client.wait(task_id, timeout=30)
    assert final["status"] == "completed", final
    assert final["completed"] == 3
    assert [r["index"] for r in final["results"]] == [0, 1, 2]
    for result in final["results"]:
        assert result["status"] == "completed"
        assert result["object_key"] and result["sha256"] and result["bytes"] == 4096
    with_units = client.get(task_id, units=True)
    assert len(with_units["units"]) == 3
    assert {u["status"] for u in with_units["units"]} == {"completed"}


def test_submit_options_are_sent_and_shown(client: slotd.Client) -> None:
    key = unique("idem")
    deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)
    first = client.submit(
        "fixture",
        {"count": 1, "polls": 0},
        idempotency_key=key,
        priority=7,
        deadline=deadline,
        deadline_policy="best_effort",
        callback_url="https://example.com/hooks/slotd",
    )
    again = client.submit("fixture", {"count": 1, "polls": 0}, idempotency_key=key)
    assert again["task_id"] == first["task_id"], "the same idempotency key names the same task"
    view = client.get(first["task_id"])
    assert view["idempotency_key"] == key
    assert view["priority"] == 7
    assert view["deadline_policy"] == "best_effort"
    assert view.get("deadline_at") is not None
    assert abs(view["deadline_at"] - int(deadline.timestamp() * 1000)) < 1000
    hooks = client.webhooks(first["task_id"])
    assert hooks["callback_url"] == "https://example.com/hooks/slotd"


def test_a_naive_deadline_is_refused_before_sending(client: slotd.Client) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        client.submit("fixture", {"count": 1}, deadline=datetime.datetime(2030, 1, 1))


def test_list_pages_with_the_cursor(live: Live) -> None:
    # team-b is this test's alone: its list is exactly what it submits.
    requests: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [requests.append]})
    with live.client("team-b", http_client=http) as client:
        ids = [client.submit("fixture", {"count": 1, "polls": 0})["task_id"] for _ in range(7)]
        requests.clear()
        listed = list(client.list_tasks(type="fixture", page_size=3))
        assert [t["task_id"] for t in listed] == ids[::-1], "newest first, each once"
        assert all(t["tenant"] == "team-b" for t in listed)
        pages = [r for r in requests if r.url.path == "/v1/tasks"]
        assert len(pages) == 3, [str(r.url) for r in pages]
        assert "cursor" not in pages[0].url.params
        assert pages[1].url.params["cursor"] and pages[2].url.params["cursor"]
        first = client.list_page(type="fixture", limit=3)
        assert len(first["tasks"]) == 3 and first.get("next_cursor")
        last = client.list_page(type="fixture", limit=3, cursor=pages[2].url.params["cursor"])
        assert [t["task_id"] for t in last["tasks"]] == [ids[0]]
        assert not last.get("next_cursor")
    http.close()


def test_cancel_a_waiting_task(client: slotd.Client, blocker: str) -> None:
    # fixture-b has one slot, held for good by the blocker: this task waits.
    waiting = client.submit("fixture-b", {"count": 2, "behavior": "idle"})["task_id"]
    view = client.get(waiting)
    assert view["status"] == "pending"
    assert view.get("queue_position") is not None
    cancelled = client.cancel(waiting)
    assert cancelled["cancel_requested"] is True
    assert cancelled["status"] == "cancelled"
    assert client.wait(waiting, timeout=5)["status"] == "cancelled"
    assert client.retry(waiting)["retried"] == 0, "nothing is retried once cancelled"


def test_retry_resubmits_only_the_failed_units(client: slotd.Client, live: Live) -> None:
    failed = client.submit("fixture", {"count": 2, "behavior": "fail", "polls": 0, "code": "E42", "message": "no"})
    final = client.wait(failed["task_id"], timeout=30)
    assert final["status"] == "failed"
    assert final["error"]["code"] == "E42"
    assert {r["status"] for r in final["results"]} == {"failed"}
    before = live.stub.next_id
    assert client.retry(failed["task_id"])["retried"] == 2
    again = client.wait(failed["task_id"], timeout=30)
    assert again["status"] == "failed"
    assert live.stub.next_id - before == 2, "each failed unit got one new provider job"

    done = client.submit("fixture", {"count": 2, "polls": 0})
    assert client.wait(done["task_id"], timeout=30)["status"] == "completed"
    assert client.retry(done["task_id"])["retried"] == 0, "completed units are left alone"


def test_events_log_and_tenant_pages(client: slotd.Client) -> None:
    task_id = client.submit("fixture", {"count": 2, "polls": 1})["task_id"]
    client.wait(task_id, timeout=30)
    log = client.events(task_id)
    assert log["task_id"] == task_id
    events = log["events"]
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {e["task_id"] for e in events} == {task_id}
    per_unit: dict[str, list[str]] = {}
    for e in events:
        per_unit.setdefault(e["unit_id"], []).append(e["to_status"])
    assert len(per_unit) == 2
    for statuses in per_unit.values():
        assert statuses[-1] == "completed" and "submitted" in statuses

    page = client.tenant_events()
    assert page["next"]
    seen = list(page["events"])
    after = page["next"]
    while True:  # read the log to its end, page by page
        more = client.tenant_events(after=after)
        seen += more["events"]
        if not more["events"]:
            break
        after = more["next"]
    mine = [e["id"] for e in seen if e["task_id"] == task_id]
    assert mine == ids, "the tenant's log holds the task's events, in order"
