"""Starting the real ``slotd`` binary (and its Kling simulator) for the suite, the way the
Rust end-to-end tests do (``tests/e2e/support.rs``: a ``slotd.toml`` in a temporary directory,
``slotd serve --config``, wait until healthy)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from _servers import free_port

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
if not TARGET.is_absolute():
    TARGET = REPO / TARGET

WEBHOOK_SECRET = "whsec_c2xvdGQtcHl0aG9uLXRlc3RzLXdlYmhvb2stc2VjcmV0IQ=="
KEYS = {
    "team-a": "team-a-key-0001",
    "team-b": "team-b-key-0001",
    "burst": "burst-key-00001",
    "ops": "ops-key-0000001",
}
#: The simulator's time runs 100x faster; the Kling handler is told so.
TIME_SCALE = 0.01


def eventually(what: str, probe: Callable[[], T | None], timeout: float = 30.0, every: float = 0.05) -> T:
    """``probe()`` until it returns something other than ``None`` (or False), within
    ``timeout`` seconds; fails naming ``what`` and the last exception seen."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
        except Exception as e:  # the thing polled may not be up yet
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last error: {last!r})")
        time.sleep(every)


def slotd_bin() -> Path:
    path = Path(os.environ.get("SLOTD_BIN") or REPO / "target" / "debug" / "slotd")
    if not path.is_absolute():
        path = REPO / path
    if not path.exists():
        raise RuntimeError(
            f"no slotd binary at {path}: build it (cargo build -p slotd) or set SLOTD_BIN"
        )
    return path


def fixture_wasm() -> Path:
    """The test fixture handler, built by ``slotd-handlers``' build script."""
    explicit = os.environ.get("SLOTD_FIXTURE_WASM")
    path = Path(explicit) if explicit else TARGET / "wasm-plugins" / "wasm32-wasip2" / "release" / "fixture.wasm"
    if not path.exists():
        raise RuntimeError(
            f"no fixture handler at {path}: it is built with the host's tests "
            "(cargo build -p slotd-handlers), or set SLOTD_FIXTURE_WASM"
        )
    return path


def kling_wasm() -> Path:
    path = REPO / "plugins" / "kling-video.wasm"
    if not path.exists():
        raise RuntimeError(f"no {path}: cargo build -p slotd-handlers places it there")
    return path


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Process:
    """A child process whose stderr goes to a log file, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = log
        self._log_file = open(log, "ab")
        full_env = {**os.environ, **(env or {})}
        for var in ("SLOTD_DATABASE_URL", "SLOTD_REDIS_URL", "SLOTD_LISTEN", "SLOTD_CONFIG", "SLOTD_PUBLIC_URL"):
            full_env.pop(var, None)
        full_env.setdefault("SLOTD_LOG", "warn")
        self.proc = subprocess.Popen(
            args, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env
        )

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise RuntimeError(f"{self.name} exited with {code}; its log:\n{_log_tail(self.log)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log_file.close()


class KlingSim:
    """``slotd sim kling`` on a free port."""

    def __init__(self, workdir: Path, *, failure_rate: float, seed: int) -> None:
        self.port = free_port()
        self.process = Process(
            "slotd sim kling",
            [
                str(slotd_bin()), "sim", "kling",
                "--listen", f"127.0.0.1:{self.port}",
                "--concurrency", "20",
                "--time-scale", str(TIME_SCALE),
                "--access-key", "AK", "--secret-key", "SK",
                "--failure-after-accept-rate", str(failure_rate),
                "--long-tail-rate", "0",
                "--seed", str(seed),
            ],
            workdir / "sim-kling.log",
        )
        eventually(
            "the Kling simulator answers",
            lambda: self.process.check_alive() or httpx.get(f"{self.url}/_sim/stats", timeout=2).status_code == 200,
            timeout=30,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/_sim/stats", timeout=5).json())

    def stop(self) -> None:
        self.process.stop()


class Slotd:
    """``slotd serve`` with a config written into ``workdir``."""

    def __init__(self, workdir: Path, *, stub_address: str, sim: KlingSim, cache_dir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        plugins = workdir / "plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        shutil.copy(fixture_wasm(), plugins / "fixture.wasm")
        shutil.copy(kling_wasm(), plugins / "kling-video.wasm")
        self.objects = workdir / "objects"
        keys = "\n".join(
            f'[[api_keys]]\nkey = "{key}"\ntenant = "{tenant}"\n' + ("admin = true\n" if tenant == "ops" else "")
            for tenant, key in KEYS.items()
        )
        config = f"""
listen = "127.0.0.1:{self.port}"
database_url = "sqlite://{workdir / 'slotd.db'}"
plugins_dir = "{plugins}"
object_store = "file://{self.objects}"
cache_dir = "{cache_dir}"

[api]
rate_limit = {{ per_second = 50, burst = 100 }}

[webhooks]
secret = "{WEBHOOK_SECRET}"
allow_private = true
retry_base = "200ms"
retry_max = "2s"
timeout = "5s"

[scheduler]
tick_interval = "100ms"
min_rest = "5ms"
poll_initial = "20ms"
poll_max = "200ms"

[limits]
call_deadline = "5s"

[pools.fixture]
max_slots = 5

[pools.fixture-b]
max_slots = 1

[pools."kling:video"]
max_slots = 20

[handlers.fixture]
base_url = "http://{stub_address}"
allowed_hosts = ["{stub_address}"]

[handlers.kling-video]
base_url = "{sim.url}"
access_key = "AK"
secret_key = "SK"
allowed_hosts = ["127.0.0.1:{sim.port}"]
expected_duration_scale = {TIME_SCALE}

[routes.clip]
policy = "ordered"
targets = [{{ handler = "kling-video", model = "kling-v1-6" }}]

{keys}
"""
        self.config_path = workdir / "slotd.toml"
        self.config_path.write_text(config)
        self.process = Process(
            "slotd serve",
            [str(slotd_bin()), "serve", "--config", str(self.config_path)],
            workdir / "slotd.log",
        )
        headers = {"authorization": f"Bearer {KEYS['ops']}"}

        def loaded() -> bool:
            self.process.check_alive()
            answer = httpx.get(f"{self.url}/v1/handlers", headers=headers, timeout=5)
            names = {h["name"] for h in answer.json()} if answer.status_code == 200 else set()
            return {"fixture", "kling-video"} <= names

        eventually("slotd serves with the fixture and kling-video handlers loaded", loaded, timeout=120, every=0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self) -> str:
        return _log_tail(self.process.log)

    def stop(self) -> None:
        self.process.stop()
