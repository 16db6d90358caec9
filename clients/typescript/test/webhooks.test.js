// Completion webhooks: real deliveries from a real slotd to a node:http receiver, verified with
// verifyWebhook (node:crypto) and verifyWebhookAsync (WebCrypto); the same delivery altered in
// each way a forger or a replay would alter it is refused, naming why. Also the scheme's
// official test vector (the one slotd's Rust signer is pinned to).

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';

import { SlotdClient } from '../src/index.js';
import {
  WebhookVerificationError,
  signWebhook,
  signWebhookAsync,
  verifyWebhook,
  verifyWebhookAsync,
} from '../src/webhooks.js';
import { FAST_SCHEDULER, eventually, fixtureSections, startSlotd } from './support/slotd.js';
import { startStubProvider } from './support/stub-provider.js';

/** The `[webhooks] secret` of the slotd under test. */
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

// The Standard Webhooks test vector (host/core/src/standard_webhooks.rs pins slotd to it).
const VECTOR = {
  secret: 'whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=',
  id: '9876543210',
  timestamp: 1781080794,
  body: '{"id":"1234567890","status":"succeeded","message":"","create_time":1781080778802,"update_time":1781080794151}',
  signature: 'v1,UsKlJP00XoQyOn410NM9xv34sP+Gl0jnOO9Lcpr7NJ4=',
};

/** A receiver that logs every request (headers and raw body) and answers 204. */
async function startReceiver() {
  const got = [];
  const waiters = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const hit = { path: req.url, headers: req.headers, body: Buffer.concat(chunks) };
      got.push(hit);
      res.writeHead(204).end();
      for (const w of [...waiters]) {
        if (w.match(hit)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(hit);
        }
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: (path) => `http://127.0.0.1:${server.address().port}${path}`,
    got,
    /** The first request (already received or to come) whose path is `path`. */
    delivery(path, timeoutMs = 20_000) {
      const seen = got.find((h) => h.path === path);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no delivery to ${path} within ${timeoutMs} ms`)), timeoutMs);
        waiters.push({ match: (h) => h.path === path, resolve: (h) => { clearTimeout(timer); resolve(h); } });
      });
    },
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(r));
    },
  };
}

let stub;
let slotd;
let receiver;
let client;
before(async () => {
  stub = await startStubProvider();
  receiver = await startReceiver();
  slotd = await startSlotd({
    name: 'webhooks',
    handlers: ['fixture'],
    expectTypes: ['fixture'],
    config: `${FAST_SCHEDULER}
[webhooks]
secret = "${SECRET}"
allow_private = true
retry_base = "100ms"
retry_max = "500ms"
timeout = "2s"
${fixtureSections(stub)}`,
  });
  client = new SlotdClient({ baseUrl: slotd.baseUrl });
});
after(async () => {
  await slotd?.stop();
  await receiver?.close();
  await stub?.close();
});

test('the official test vector signs and verifies', async () => {
  const { secret, id, timestamp, body, signature } = VECTOR;
  assert.equal(signWebhook(secret, id, timestamp, body), signature);
  assert.equal(await signWebhookAsync(secret, id, timestamp, body), signature);
  const headers = { 'webhook-id': id, 'webhook-timestamp': String(timestamp), 'webhook-signature': `v1,bm90IGl0 ${signature}` };
  const now = new Date((timestamp + 6) * 1000);
  assert.equal(verifyWebhook(secret, headers, body, { now }).status, 'succeeded', 'any of several signatures may match');
  assert.equal((await verifyWebhookAsync(secret, new Headers(headers), body, { now })).id, '1234567890');
});

test('a real completion webhook verifies, and every forgery of it is refused', async () => {
  const task = await client.submit('fixture', { count: 2 }, { callbackUrl: receiver.url('/hook/completed') });
  const view = await client.wait(task.task_id, { timeoutMs: 30_000 });
  assert.equal(view.status, 'completed');
  const hit = await receiver.delivery('/hook/completed');
  const { headers, body } = hit;

  // Verified: the event is the task's end, with its view, under the id docs/api.md promises.
  assert.equal(headers['webhook-id'], `msg_${task.task_id}_completed`);
  const event = verifyWebhook(SECRET, headers, body);
  assert.equal(event.type, 'task.completed');
  assert.equal(event.data.task_id, task.task_id);
  assert.equal(event.data.status, 'completed');
  assert.equal(event.data.results.length, 2);
  assert.deepEqual(await verifyWebhookAsync(SECRET, headers, body), event, 'WebCrypto agrees with node:crypto');
  assert.deepEqual(verifyWebhook(SECRET, headers, body.toString('utf8')), event, 'a string body verifies too');
  assert.deepEqual(verifyWebhook(SECRET, new Headers(headers), new Uint8Array(body)), event, 'fetch Headers and bytes too');

  // Forged or replayed: each refused with the reason.
  const refusal = (fn) => {
    try {
      fn();
    } catch (e) {
      assert.ok(e instanceof WebhookVerificationError, `not a WebhookVerificationError: ${e}`);
      return { code: e.code, message: e.message };
    }
    assert.fail('the forged webhook was accepted');
  };
  const tampered = Buffer.from(body.toString('utf8').replace('"completed"', '"failed"'));
  assert.notDeepEqual(tampered, body);
  assert.equal(refusal(() => verifyWebhook(SECRET, headers, tampered)).code, 'invalid_signature');
  await assert.rejects(verifyWebhookAsync(SECRET, headers, tampered), { code: 'invalid_signature' });
  assert.equal(
    refusal(() => verifyWebhook(SECRET, { ...headers, 'webhook-id': `msg_${task.task_id}_failed` }, body)).code,
    'invalid_signature',
  );
  const otherSecret = 'whsec_' + Buffer.from('another secret of 24 bytes').toString('base64');
  const wrongKey = refusal(() => verifyWebhook(otherSecret, headers, body));
  assert.equal(wrongKey.code, 'invalid_signature');
  assert.match(wrongKey.message, /no webhook signature matches/);

  const sent = Number(headers['webhook-timestamp']);
  assert.ok(Math.abs(sent - Date.now() / 1000) < 60, 'slotd stamps the delivery with its clock, in seconds');
  const replay = refusal(() => verifyWebhook(SECRET, headers, body, { now: (sent + 301) * 1000 }));
  assert.equal(replay.code, 'timestamp_too_old');
  assert.match(replay.message, /is 301 s old, more than the 300 s allowed/);
  assert.ok(verifyWebhook(SECRET, headers, body, { now: (sent + 299) * 1000 }), 'inside the window it passes');
  assert.equal(refusal(() => verifyWebhook(SECRET, headers, body, { now: (sent + 61) * 1000, toleranceSeconds: 60 })).code, 'timestamp_too_old');
  assert.equal(refusal(() => verifyWebhook(SECRET, headers, body, { now: (sent - 301) * 1000 })).code, 'timestamp_in_future');
  // A replay with a fresh timestamp but the old signature: the timestamp is signed.
  assert.equal(refusal(() => verifyWebhook(SECRET, { ...headers, 'webhook-timestamp': String(sent + 5) }, body)).code, 'invalid_signature');

  for (const name of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
    const { [name]: _gone, ...rest } = headers;
    const missing = refusal(() => verifyWebhook(SECRET, rest, body));
    assert.deepEqual(missing, { code: 'missing_header', message: `the ${name} header is missing` });
  }
  assert.equal(refusal(() => verifyWebhook(SECRET, { ...headers, 'webhook-timestamp': 'soon' }, body)).code, 'invalid_timestamp');
  assert.equal(refusal(() => verifyWebhook(SECRET, { ...headers, 'webhook-signature': 'v2,abc' }, body)).code, 'invalid_signature');
  assert.equal(refusal(() => verifyWebhook('whsec_***', headers, body)).code, 'invalid_secret');
  assert.throws(() => verifyWebhook(SECRET, headers, JSON.parse(body)), /raw request body/);
});

test("slotd records the receiver's 2xx: the task's deliveries and the tenant's list show it delivered", async () => {
  const task = await client.submit('fixture', { behavior: 'fail', code: 'E_TEST', message: 'refused by the stub' }, {
    callbackUrl: receiver.url('/hook/failed'),
  });
  const view = await client.wait(task.task_id, { timeoutMs: 30_000 });
  assert.equal(view.status, 'failed');
  assert.deepEqual(view.error, { code: 'E_TEST', message: 'refused by the stub' });
  const hit = await receiver.delivery('/hook/failed');
  const event = verifyWebhook(SECRET, hit.headers, hit.body);
  assert.equal(event.type, 'task.failed');
  assert.equal(hit.headers['webhook-id'], `msg_${task.task_id}_failed`);

  const deliveries = await eventually('the delivery recorded as delivered', async () => {
    const w = await client.webhooks(task.task_id);
    return w.deliveries[0]?.status === 'delivered' ? w : undefined;
  });
  assert.equal(deliveries.callback_url, receiver.url('/hook/failed'));
  const [d] = deliveries.deliveries;
  assert.equal(d.id, `msg_${task.task_id}_failed`);
  assert.equal(d.event, 'task.failed');
  assert.equal(d.attempts.length, 1);
  assert.equal(d.attempts[0].status, 204);

  const list = await client.listWebhooks({ status: 'delivered', limit: 50 });
  const mine = list.deliveries.find((x) => x.id === d.id);
  assert.ok(mine, `the tenant's list holds ${d.id}`);
  assert.equal(mine.tenant, 'local');
  assert.equal(mine.attempts, 1);
});
