#!/usr/bin/env python3
"""Several video tasks at once with the asyncio client: submit them concurrently, report each
as it ends (each ``wait`` follows its task's live stream, no polling), retry the failed shots
of those that failed.

    export SLOTD_URL=http://127.0.0.1:8080 SLOTD_API_KEY=...
    python3 examples/python/many_tasks_async.py --tasks 3 --shots 4

Exit status 0 when every task completed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import slotd


async def run_one(client: slotd.AsyncClient, name: str, shots: int, priority: int, retries: int) -> str:
    payload = {
        "model_name": "kling-v1-6",
        "duration": "5",
        "aspect_ratio": "9:16",
        "shots": [{"prompt": f"{name}, shot {i + 1}: a paper boat on a puddle"} for i in range(shots)],
    }
    task = await client.submit("video", payload, priority=priority, idempotency_key=f"{name}-{time.time_ns()}")
    view = await client.wait(task["task_id"], timeout=600)
    for _ in range(retries):
        if view["status"] != "failed":
            break
        retried = (await client.retry(task["task_id"]))["retried"]
        print(f"{name}: retrying {retried} failed shots", flush=True)
        view = await client.wait(task["task_id"], timeout=600)
    print(f"{name} (priority {priority}): {view['status']}, {view['completed']}/{view['total']} shots", flush=True)
    return view["status"]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SLOTD_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--key", default=os.environ.get("SLOTD_API_KEY"))
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--retries", type=int, default=3)
    args = parser.parse_args()
    async with slotd.AsyncClient(args.url, api_key=args.key) as client:
        statuses = await asyncio.gather(
            *(run_one(client, f"ad-{n + 1}", args.shots, priority=10 * n, retries=args.retries) for n in range(args.tasks))
        )
    return 0 if all(s == "completed" for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
