"""Pools, routes, handlers and releases, budgets, and who-am-I, against the live slotd."""

from __future__ import annotations

import hashlib

import pytest

import slotd
from _slotd import fixture_wasm
from conftest import Live


def test_me_health_ready(client: slotd.Client, admin: slotd.Client) -> None:
    assert client.me() == {"tenant": "team-a", "admin": False}
    assert admin.me() == {"tenant": "ops", "admin": True}
    assert client.health() == {"status": "ok"}
    assert client.ready() == {"status": "ready"}


def test_pools_and_a_pool_timeline(client: slotd.Client) -> None:
    task_id = client.submit("fixture", {"count": 2, "polls": 0})["task_id"]
    client.wait(task_id, timeout=30)
    pools = {p["name"]: p for p in client.pools()}
    assert {"fixture", "fixture-b", "kling:video"} <= set(pools)
    assert pools["fixture"]["max_slots"] == 5
    assert pools["fixture-b"]["max_slots"] == 1
    assert pools["kling:video"]["max_slots"] == 20
    assert pools["fixture"]["handlers"] == ["fixture"]
    assert pools["fixture"]["units"]["completed"] >= 2
    timeline = client.pool_timeline("fixture", minutes=5)
    assert timeline["pool"] == "fixture" and timeline["minutes"] == 5
    assert any(i.get("task_id") == task_id for i in timeline["intervals"])
    with pytest.raises(slotd.BadRequestError) as e:
        client.pool_timeline("fixture", minutes=61)
    assert e.value.field == "minutes"


def test_routes(client: slotd.Client) -> None:
    routes = {r["name"]: r for r in client.routes()}
    clip = routes["clip"]
    assert clip["policy"] == "ordered"
    [target] = clip["targets"]
    assert (target["handler"], target["model"], target["state"]) == ("kling-video", "kling-v1-6", "ready")
    assert target["pools"][0]["name"] == "kling:video"


def test_handlers_history_and_releases(client: slotd.Client, admin: slotd.Client) -> None:
    handlers = {h["name"]: h for h in client.handlers()}
    assert {"fixture", "kling-video"} <= set(handlers)
    fixture = handlers["fixture"]
    assert fixture["sha256"] == hashlib.sha256(fixture_wasm().read_bytes()).hexdigest()
    assert {t["name"] for t in fixture["task_types"]} >= {"fixture", "fixture-b"}
    assert handlers["kling-video"]["task_types"][0]["name"] == "video"
    versions = client.handlers(all=True)
    assert any(v["sha256"] == fixture["sha256"] and v["state"] == "active" for v in versions)
    history = client.handler_history(name="fixture", limit=5)
    assert history and all(row.get("name") == "fixture" for row in history)
    assert len(client.handler_history(limit=1)) == 1
    everything = admin.releases()
    assert {"releases", "processes", "rollouts"} <= set(everything)
    mine = admin.releases("fixture")
    assert all(r["name"] == "fixture" for r in mine["releases"])


def test_publish_a_handler_and_act_on_a_rollout(client: slotd.Client, admin: slotd.Client) -> None:
    wasm = fixture_wasm().read_bytes()
    with pytest.raises(slotd.ForbiddenError):
        client.publish_handler(wasm)
    first = admin.publish_handler(wasm)
    assert first["published"] in ("new", "already")
    assert first["release"]["sha256"] == hashlib.sha256(wasm).hexdigest()
    assert first["release"]["name"] == "fixture"
    again = admin.publish_handler(wasm)
    assert again["published"] == "already"
    assert any(r["sha256"] == first["release"]["sha256"] and r["current"] for r in admin.releases("fixture")["releases"])
    with pytest.raises(slotd.UnprocessableError) as refused:
        admin.publish_handler(b"not a component")
    assert "not a WebAssembly file" in refused.value.detail
    # No rollout runs: acting on one is refused, naming why.
    with pytest.raises(slotd.ApiError) as e:
        admin.rollout("fixture", "pause")
    assert e.value.status in (404, 409), e.value
    assert e.value.detail


def test_budgets(live: Live, client: slotd.Client, admin: slotd.Client) -> None:
    with pytest.raises(slotd.ForbiddenError):
        client.set_budget("team-a", limit=10.0, period="1d")
    usage = admin.set_budget("team-a", limit=250.0, period="1d")
    assert usage["tenant"] == "team-a"
    assert usage["budget"] is not None
    assert usage["budget"]["limit"] == 250.0 and usage["budget"]["period_ms"] == 86_400_000
    assert usage["budget"]["source"] == "api"
    seen = client.usage("team-a")
    assert seen["budget"] is not None and seen["budget"]["limit"] == 250.0
    assert seen["remaining"] is not None and seen["remaining"] <= 250.0
    with pytest.raises(slotd.ForbiddenError):
        client.usage("team-b")
    with pytest.raises(slotd.UnprocessableError) as e:
        admin.set_budget("team-a", limit=10.0, period="1000d")
    assert e.value.field == "period"
    # Lifted again, so the other tests' tasks are never held for budget.
    admin.set_budget("team-a", limit=1e12, period="1d")
