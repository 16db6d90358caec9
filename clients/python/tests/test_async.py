"""The asyncio client against the live slotd: the same calls, awaited."""

from __future__ import annotations

import asyncio
import time

import pytest

import slotd
from _servers import CuttingProxy
from _slotd import KEYS
from conftest import Live


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_async_submit_wait_list_events(live: Live) -> None:
    async def go() -> None:
        async with slotd.AsyncClient(live.url, api_key=KEYS["team-a"]) as client:
            assert await client.me() == {"tenant": "team-a", "admin": False}
            tasks = await asyncio.gather(*(client.submit("fixture", {"count": 2, "polls": 1}) for _ in range(3)))
            views = await asyncio.gather(*(client.wait(t["task_id"], timeout=30) for t in tasks))
            assert [v["status"] for v in views] == ["completed"] * 3
            ids = {t["task_id"] for t in tasks}
            listed = [t["task_id"] async for t in client.list_tasks(type="fixture", page_size=2)]
            assert ids <= set(listed) and len(listed) == len(set(listed))
            view = await client.get(tasks[0]["task_id"], units=True)
            assert len(view["units"]) == 2
            log = (await client.events(tasks[0]["task_id"]))["events"]
            async with client.watch(tasks[0]["task_id"]) as stream:
                streamed = [e async for e in stream]
            assert [e.data["id"] for e in streamed if e.event == "unit"] == [e["id"] for e in log]
            assert streamed[-1].event == "end"
            page = await client.tenant_events()
            assert page["next"]
            assert (await client.retry(tasks[0]["task_id"]))["retried"] == 0
            assert (await client.webhooks(tasks[0]["task_id"]))["deliveries"] == []
            assert isinstance((await client.list_webhooks(limit=5))["deliveries"], list)
            assert any(p["name"] == "fixture" for p in await client.pools())
            assert (await client.pool_timeline("fixture"))["pool"] == "fixture"
            assert any(r["name"] == "clip" for r in await client.routes())
            assert any(h["name"] == "fixture" for h in await client.handlers())
            assert await client.handlers(all=True)
            assert await client.handler_history(limit=2)
            assert (await client.usage("team-a"))["tenant"] == "team-a"
            assert await client.health() == {"status": "ok"}
            assert await client.ready() == {"status": "ready"}

    run(go())


def test_async_errors_and_cancel(live: Live, blocker: str) -> None:
    async def go() -> None:
        async with slotd.AsyncClient(live.url, api_key=KEYS["team-a"]) as client:
            with pytest.raises(slotd.UnprocessableError) as e:
                await client.submit("fixture", {"count": -1})
            assert e.value.field == "count"
            with pytest.raises(slotd.NotFoundError):
                await client.get("nope")
            waiting = await client.submit("fixture-b", {"count": 1, "behavior": "idle"})
            started = time.monotonic()
            with pytest.raises(slotd.WaitTimeout) as w:
                await client.wait(waiting["task_id"], timeout=0.5)
            assert 0.5 <= time.monotonic() - started < 5
            assert w.value.task is not None and w.value.task["status"] == "pending"
            cancelled = await client.cancel(waiting["task_id"])
            assert cancelled["cancel_requested"]
        async with slotd.AsyncClient(live.url, api_key="wrong-key-000") as stranger:
            with pytest.raises(slotd.UnauthorizedError):
                await stranger.me()
        async with slotd.AsyncClient(live.url, api_key=KEYS["ops"]) as admin:
            with pytest.raises(slotd.ForbiddenError):
                async with slotd.AsyncClient(live.url, api_key=KEYS["team-a"]) as client:
                    await client.set_budget("team-b", limit=1.0, period="1d")
            assert (await admin.set_budget("team-b", limit=1e12, period="1d"))["tenant"] == "team-b"
            assert (await admin.releases())["releases"] is not None
            with pytest.raises(slotd.ApiError):
                await admin.rollout("fixture", "resume")

    run(go())


def test_async_watch_resumes_after_a_cut(live: Live) -> None:
    async def go() -> None:
        async with slotd.AsyncClient(live.url, api_key=KEYS["team-a"]) as client:
            task_id = (await client.submit("fixture", {"count": 20, "polls": 1}))["task_id"]
            await client.wait(task_id, timeout=60)
            log = [e["id"] for e in (await client.events(task_id))["events"]]
        proxy = CuttingProxy(live.slotd.port, cut_after=3000)
        try:
            async with slotd.AsyncClient(proxy.url, api_key=KEYS["team-a"]) as through:
                stream = through.watch(task_id)
                events = [e async for e in stream]
            assert proxy.cut.is_set() and stream.connections == 2
            assert proxy.request_header(1, "last-event-id") in [e.id for e in events]
            assert [e.data["id"] for e in events if e.event == "unit"] == log
        finally:
            proxy.close()

    run(go())
