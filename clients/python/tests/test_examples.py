"""The runnable examples of examples/python (and docs/migrating-from-celery.md), run as users
run them: as programs, against the live slotd and its Kling simulator."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from slotd import webhooks
from _slotd import KEYS, WEBHOOK_SECRET, eventually
from conftest import Live

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "python"


def example_env(live: Live, tenant: str = "team-a") -> dict[str, str]:
    return {
        **os.environ,
        "SLOTD_URL": live.url,
        "SLOTD_API_KEY": KEYS[tenant],
        "SLOTD_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "SLOTD_OBJECTS_DIR": str(live.slotd.objects),
    }


def run_example(name: str, env: dict[str, str], *args: str, timeout: float = 120) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{name} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_submit_36_shots(live: Live) -> None:
    creates_before = live.sim.stats()["creates"]
    # Up to 6 rounds of retries: a shot failing 7 times in a row at 10% is 1 in 10^7.
    out = run_example("submit_36_shots.py", example_env(live), "--max-retries", "6")
    found = re.search(r"submitted task (\S+): 36 shots", out)
    assert found, out
    task_id = found.group(1)
    assert re.search(r"/36 completed, \d+ failed", out), "progress was shown as it went"
    # The completion webhook came and verified. The simulator fails 10% of its jobs, so the
    # first end is usually a failure; then only the failed shots are submitted again.
    webhook = re.search(r"webhook (task\.\w+): ", out)
    assert webhook, out
    failed = [int(n) for n in re.findall(r"shot (\d+) failed", out)]
    if webhook.group(1) == "task.failed":
        assert failed and re.search(rf"retry 1: {len(failed)} failed shots resubmitted", out), out
    assert re.search(rf"task {task_id} completed: 36/36 shots, \d+ bytes, every sha256 matches", out), out

    with live.client() as client:
        view = client.get(task_id, units=True)
    assert view["status"] == "completed"
    resubmitted = sorted(u["index"] + 1 for u in view["units"] if u["submit_attempt"] > 0)
    assert sorted(set(failed)) == resubmitted, "exactly the failed shots were submitted again"
    stats = live.sim.stats()
    assert stats["creates"] - creates_before == 36 + len(failed), "one Kling job per shot and per retry"
    assert stats["duplicate_refusals"] == 0 and stats["max_running"] <= 20


def test_many_tasks_async(live: Live) -> None:
    out = run_example("many_tasks_async.py", example_env(live), "--tasks", "3", "--shots", "3", "--retries", "6")
    for n in (1, 2, 3):
        assert re.search(rf"ad-{n} \(priority {10 * (n - 1)}\): completed, 3/3 shots", out), out


def test_webhook_receiver(live: Live, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "webhook_receiver.py"), "--listen", "127.0.0.1:0",
         "--db", str(tmp_path / "hooks.sqlite")],
        env=example_env(live), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        address = json.loads(proc.stdout.readline())["listening"]
        url = f"http://{address}/hooks"
        with live.client() as client:
            task_id = client.submit("fixture", {"count": 2, "polls": 0}, callback_url=url)["task_id"]
            line = json.loads(proc.stdout.readline())
        assert line["outcome"] == "recorded", line
        assert (line["task_id"], line["type"], line["status"]) == (task_id, "task.completed", "completed")
        assert line["id"].startswith(f"msg_{task_id}")

        # A resend of the same delivery (same id) is answered 2xx and not acted on again; a
        # forged one is refused.
        body = json.dumps({"type": "task.completed", "timestamp": 1, "data": {
            "task_id": task_id, "status": "completed", "completed": 2, "total": 2}}).encode()
        stamp = int(time.time())
        headers = {"webhook-id": line["id"], "webhook-timestamp": str(stamp),
                   "webhook-signature": webhooks.sign(WEBHOOK_SECRET, line["id"], stamp, body),
                   "content-type": "application/json"}
        assert httpx.post(url, content=body, headers=headers).status_code == 204
        assert json.loads(proc.stdout.readline())["outcome"] == "duplicate"
        forged = body.replace(b'"completed", "completed": 2', b'"failed", "completed": 0')
        assert httpx.post(url, content=forged, headers=headers).status_code == 400
        refused = json.loads(proc.stdout.readline())
        assert (refused["outcome"], refused["reason"]) == ("refused", "bad-signature")
        old = {**headers, "webhook-timestamp": str(stamp - 3600),
               "webhook-signature": webhooks.sign(WEBHOOK_SECRET, line["id"], stamp - 3600, body)}
        assert httpx.post(url, content=body, headers=old).status_code == 400
        assert json.loads(proc.stdout.readline())["reason"] == "stale"
        # slotd recorded its own delivery as delivered.
        with live.client() as client:
            eventually("delivery recorded", lambda: client.webhooks(task_id)["deliveries"][0]["status"] == "delivered")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
