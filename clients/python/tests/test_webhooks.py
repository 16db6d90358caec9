"""Completion webhooks: a real delivery from slotd to a local receiver, verified; then forged
copies of it refused, each naming why. Also the Standard Webhooks test vectors."""

from __future__ import annotations

import json

import httpx
import pytest

import slotd
from slotd import webhooks
from _servers import WebhookReceiver
from _slotd import WEBHOOK_SECRET, eventually


def test_a_real_delivery_verifies_and_forgeries_do_not(client: slotd.Client, receiver: WebhookReceiver) -> None:
    task_id = client.submit("fixture", {"count": 2, "polls": 0}, callback_url=receiver.url("/slotd"))["task_id"]
    delivery = receiver.wait_for(lambda d: task_id.encode() in d.body, timeout=30)
    assert delivery.path == "/slotd"

    event = webhooks.verify(WEBHOOK_SECRET, delivery.headers, delivery.body)
    assert event["type"] == "task.completed"
    assert event["data"]["task_id"] == task_id
    assert event["data"]["status"] == "completed"
    assert event["data"]["completed"] == 2
    assert delivery.headers["webhook-id"].startswith(f"msg_{task_id}")
    # Headers in another case, as pairs, or as httpx.Headers: the same.
    upper = {k.upper(): v for k, v in delivery.headers.items()}
    assert webhooks.verify(WEBHOOK_SECRET, upper, delivery.body) == event
    assert webhooks.verify(WEBHOOK_SECRET, list(delivery.headers.items()), delivery.body) == event
    assert webhooks.verify(WEBHOOK_SECRET, httpx.Headers(delivery.headers), delivery.body.decode()) == event

    def refused(reason: str, headers: dict[str, str], body: bytes, **kw: float) -> str:
        with pytest.raises(webhooks.WebhookVerificationError) as e:
            webhooks.verify(kw.pop("secret", WEBHOOK_SECRET), headers, body, **kw)  # type: ignore[arg-type]
        assert e.value.reason == reason, e.value
        return str(e.value)

    # The body altered: a failed task passed off as completed.
    forged = json.loads(delivery.body)
    forged["data"]["status"] = "failed"
    message = refused("bad-signature", delivery.headers, json.dumps(forged).encode())
    assert "no webhook signature matches" in message
    # One byte more (re-encoded JSON counts as altered too).
    refused("bad-signature", delivery.headers, delivery.body + b" ")
    # Another delivery's id on this body.
    refused("bad-signature", {**delivery.headers, "webhook-id": "msg_other_task.completed"}, delivery.body)
    # Signed with another secret.
    other = webhooks.sign("whsec_" + "b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA==", delivery.headers["webhook-id"],
                          int(delivery.headers["webhook-timestamp"]), delivery.body)
    refused("bad-signature", {**delivery.headers, "webhook-signature": other}, delivery.body)
    # Verified with the wrong secret.
    refused("bad-signature", delivery.headers, delivery.body, secret="whsec_d3Jvbmctc2VjcmV0")
    # No signature at all / not a v1 one.
    headers = dict(delivery.headers)
    del headers["webhook-signature"]
    assert "webhook-signature" in refused("missing-header", headers, delivery.body)
    refused("bad-signature", {**delivery.headers, "webhook-signature": "v2,abc"}, delivery.body)
    # Replayed later than the window, or stamped ahead of it.
    stamp = int(delivery.headers["webhook-timestamp"])
    assert "old" in refused("stale", delivery.headers, delivery.body, now=stamp + 301)
    refused("future", delivery.headers, delivery.body, now=stamp - 301)
    # Inside a custom window it passes; outside it does not.
    assert webhooks.verify(WEBHOOK_SECRET, delivery.headers, delivery.body, now=stamp + 500, tolerance=600) == event
    refused("stale", delivery.headers, delivery.body, now=stamp + 61, tolerance=60)
    refused("bad-timestamp", {**delivery.headers, "webhook-timestamp": "soon"}, delivery.body)
    refused("bad-secret", delivery.headers, delivery.body, secret="not-whsec")

    # slotd recorded the delivery (the record follows the receiver's answer: poll for it).
    def delivered() -> slotd.models.DeliveryView | None:
        deliveries = client.webhooks(task_id)["deliveries"]
        return deliveries[0] if deliveries and deliveries[0]["status"] == "delivered" else None

    record = eventually("the delivery recorded as delivered", delivered, timeout=10)
    assert record["id"] == delivery.headers["webhook-id"]
    assert record["attempts"][0]["status"] == 204
    listed = client.list_webhooks(status="delivered", limit=500)["deliveries"]
    assert any(d["id"] == record["id"] and d["tenant"] == "team-a" for d in listed)


def test_a_failed_and_a_cancelled_task_are_delivered_too(
    client: slotd.Client, receiver: WebhookReceiver, blocker: str
) -> None:
    failed = client.submit("fixture", {"count": 1, "behavior": "fail", "polls": 0}, callback_url=receiver.url())["task_id"]
    d = receiver.wait_for(lambda d: failed.encode() in d.body, timeout=30)
    event = webhooks.verify(WEBHOOK_SECRET, d.headers, d.body)
    assert event["type"] == "task.failed" and event["data"]["status"] == "failed"

    waiting = client.submit("fixture-b", {"count": 1, "behavior": "idle"}, callback_url=receiver.url())["task_id"]
    client.cancel(waiting)
    d = receiver.wait_for(lambda d: waiting.encode() in d.body, timeout=30)
    assert webhooks.verify(WEBHOOK_SECRET, d.headers, d.body)["type"] == "task.cancelled"


def test_standard_webhooks_vectors() -> None:
    # The scheme's published example, and slotd's own (host/core/src/standard_webhooks.rs).
    assert (
        webhooks.sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}')
        == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )
    body = '{"id":"1234567890","status":"succeeded","message":"","create_time":1781080778802,"update_time":1781080794151}'
    assert (
        webhooks.sign("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=", "9876543210", 1781080794, body)
        == "v1,UsKlJP00XoQyOn410NM9xv34sP+Gl0jnOO9Lcpr7NJ4="
    )


def test_any_of_several_signatures_may_match() -> None:
    body = json.dumps({"type": "task.completed", "timestamp": 1, "data": {"task_id": "t"}}).encode()
    good = webhooks.sign(WEBHOOK_SECRET, "msg_t_task.completed", 1_700_000_000, body)
    headers = {
        "webhook-id": "msg_t_task.completed",
        "webhook-timestamp": "1700000000",
        "webhook-signature": f"v1,bm90LWl0 {good}",
    }
    assert webhooks.verify(WEBHOOK_SECRET, headers, body, now=1_700_000_010)["data"]["task_id"] == "t"
    with pytest.raises(webhooks.WebhookVerificationError) as e:
        webhooks.verify(WEBHOOK_SECRET, {**headers, "webhook-signature": "v1,bm90LWl0"}, body, now=1_700_000_010)
    assert e.value.reason == "bad-signature"


def test_the_end_of_a_retried_task_is_delivered(client: slotd.Client, receiver: WebhookReceiver) -> None:
    task_id = client.submit("fixture", {"count": 1, "behavior": "fail", "polls": 0}, callback_url=receiver.url())["task_id"]
    first = receiver.wait_for(lambda d: task_id.encode() in d.body, timeout=30)
    assert client.retry(task_id)["retried"] == 1
    assert client.wait(task_id, timeout=30)["status"] == "failed"
    # The first delivery came within a fraction of a second; give the second's many times that.
    # It needs an id of its own: receivers deduplicate on webhook-id.
    receiver.wait_for(
        lambda d: task_id.encode() in d.body and d.headers["webhook-id"] != first.headers["webhook-id"], timeout=3
    )
