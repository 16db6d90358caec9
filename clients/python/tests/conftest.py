"""The live slotd the suite runs against: one per test session, started from the real binary
(``SLOTD_BIN``, default ``target/debug/slotd``) with the fixture handler (against the stub
provider in ``_servers.py``) and the ``kling-video`` handler (against ``slotd sim kling``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import slotd  # noqa: E402
from _servers import StubProvider, WebhookReceiver  # noqa: E402
from _slotd import KEYS, KlingSim, Slotd, eventually  # noqa: E402


@dataclass
class Live:
    slotd: Slotd
    sim: KlingSim
    stub: StubProvider

    @property
    def url(self) -> str:
        return self.slotd.url

    def client(self, tenant: str = "team-a", **kwargs: object) -> slotd.Client:
        return slotd.Client(self.url, api_key=KEYS[tenant], **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("slotd")
    stub = StubProvider()
    # 10% of accepted Kling jobs fail later: the examples retry only those units.
    sim = KlingSim(workdir, failure_rate=0.1, seed=7)
    try:
        server = Slotd(workdir, stub_address=stub.address, sim=sim, cache_dir=workdir / "cache")
    except BaseException:
        sim.stop()
        stub.close()
        raise
    try:
        yield Live(server, sim, stub)
    finally:
        server.stop()
        sim.stop()
        stub.close()


@pytest.fixture(scope="session")
def blocker(live: Live) -> str:
    """A task whose idle unit holds fixture-b's one slot for good (the fixture's ``idle``
    behaviour never ends): every later fixture-b task waits, pending, until cancelled."""
    with live.client("ops") as admin:
        task_id = admin.submit("fixture-b", {"count": 1, "behavior": "idle"})["task_id"]
        eventually("the idle unit holds fixture-b's slot", lambda: admin.get(task_id)["status"] == "running")
    return task_id


@pytest.fixture
def client(live: Live) -> Iterator[slotd.Client]:
    with live.client("team-a") as c:
        yield c


@pytest.fixture
def admin(live: Live) -> Iterator[slotd.Client]:
    with live.client("ops") as c:
        yield c


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    r = WebhookReceiver()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]
