// A slotd with API keys: 401 for no key or a wrong one, 403 for what a tenant's key may not
// do, 404 for another tenant's task; and slotd's own 429 (a tenant's rate limit) and 503 (more
// requests in flight than `[api] max_concurrent_requests`), each retried by the client after
// the Retry-After slotd sent.

import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, test } from 'node:test';

import { SlotdClient, SlotdError } from '../src/index.js';
import { FAST_SCHEDULER, eventually, fixtureSections, startSlotd } from './support/slotd.js';
import { startStubProvider } from './support/stub-provider.js';

const KEYS = {
  ops: 'key-of-ops-admin-0001',
  teamA: 'key-of-team-a-0001',
  burst: 'key-of-burst-0001',
  holder: 'key-of-holder-0001',
  probe: 'key-of-probe-0001',
};
/** Requests one process handles at once: the 503 test holds them all. */
const MAX_IN_FLIGHT = 3;

let stub;
let slotd;
let ops;
let teamA;
before(async () => {
  stub = await startStubProvider();
  slotd = await startSlotd({
    name: 'auth',
    handlers: ['fixture'],
    expectTypes: ['fixture'],
    apiKey: KEYS.ops,
    config: `${FAST_SCHEDULER}
[api]
max_concurrent_requests = ${MAX_IN_FLIGHT}
rate_limit = { per_second = 2, burst = 3 }

[[api_keys]]
key = "${KEYS.ops}"
tenant = "ops"
admin = true

[[api_keys]]
key = "${KEYS.teamA}"
tenant = "team-a"

[[api_keys]]
key = "${KEYS.burst}"
tenant = "burst"

[[api_keys]]
key = "${KEYS.holder}"
tenant = "holder"

[[api_keys]]
key = "${KEYS.probe}"
tenant = "probe"
${fixtureSections(stub)}`,
  });
  ops = new SlotdClient({ baseUrl: slotd.baseUrl, apiKey: KEYS.ops });
  teamA = new SlotdClient({ baseUrl: slotd.baseUrl, apiKey: KEYS.teamA });
});
after(async () => {
  await slotd?.stop();
  await stub?.close();
});

async function problem(promise) {
  const e = await promise.then(
    (v) => assert.fail(`expected an error answer, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(e instanceof SlotdError, `expected a SlotdError, got ${e?.stack ?? e}`);
  return e;
}

test('401 without a key or with a wrong one, never retried', async () => {
  for (const apiKey of [undefined, 'not-a-key-of-this-slotd']) {
    const retries = [];
    const client = new SlotdClient({ baseUrl: slotd.baseUrl, apiKey, onRetry: (i) => retries.push(i) });
    for (const call of [() => client.me(), () => client.listPage(), () => client.submit('fixture', { count: 1 })]) {
      const e = await problem(call());
      assert.equal(e.status, 401);
      assert.equal(e.type, 'urn:slotd:problem:unauthorized');
      assert.equal(e.title, 'Unauthorized');
      assert.equal(e.detail, 'missing or invalid API key');
      assert.equal(e.attempts, 1);
    }
    const stream = await problem((async () => {
      for await (const _ of client.watchAll()) assert.fail('no stream without a key');
    })());
    assert.equal(stream.status, 401, 'a stream refused for its key is not reconnected');
    assert.deepEqual(retries, []);
  }
});

test('tenants: who a key acts for, 403 for what it may not do, 404 for another tenant\'s task', async () => {
  assert.deepEqual(await teamA.me(), { tenant: 'team-a', admin: false });
  assert.deepEqual(await ops.me(), { tenant: 'ops', admin: true });

  const { task_id } = await ops.submit('fixture', { count: 1 });
  const hidden = await problem(teamA.get(task_id));
  assert.equal(hidden.status, 404, 'another tenant\'s task looks like no task');
  assert.equal((await problem(teamA.cancel(task_id))).status, 404);
  assert.equal((await ops.wait(task_id, { timeoutMs: 30_000 })).status, 'completed');

  const list = await problem(teamA.listPage({ tenant: 'ops' }));
  assert.equal(list.status, 403);
  assert.equal(list.type, 'urn:slotd:problem:forbidden');
  const budget = await problem(teamA.setBudget('team-a', { limit: 10, period: '1d' }));
  assert.equal(budget.status, 403);
  assert.match(budget.detail, /admin/);
  assert.equal((await problem(teamA.usage('ops'))).status, 403);

  // What an admin may: set another tenant's budget, read its usage and list its tasks.
  const set = await ops.setBudget('team-a', { limit: 10, period: '1h' });
  assert.equal(set.budget.limit, 10);
  assert.equal(set.budget.period_ms, 3_600_000);
  assert.deepEqual((await teamA.usage('team-a')).budget, set.budget);
  const mine = await teamA.submit('fixture', { count: 1 });
  const seen = [];
  for await (const t of ops.list({ tenant: 'team-a', limit: 1 })) seen.push(t);
  assert.deepEqual(seen.map((t) => [t.task_id, t.tenant]), [[mine.task_id, 'team-a']]);
  await teamA.wait(mine.task_id, { timeoutMs: 30_000 });
});

test("429: a tenant past its rate limit is answered with Retry-After, and the client waits it out", async () => {
  // burst 3, 2 per second: the fourth request in a row is refused.
  const noRetry = new SlotdClient({ baseUrl: slotd.baseUrl, apiKey: KEYS.burst, maxRetries: 0 });
  let refused;
  for (let i = 0; i < 10 && !refused; i++) {
    refused = await noRetry.me().then(() => undefined, (e) => e);
  }
  assert.ok(refused instanceof SlotdError, `the rate limit refused a request: ${refused}`);
  assert.equal(refused.status, 429);
  assert.equal(refused.type, 'urn:slotd:problem:rate-limited');
  assert.equal(refused.retryAfter, 1);
  assert.match(refused.detail, /rate limit exceeded for this API key; retry in 1 s/);

  const retries = [];
  const client = new SlotdClient({ baseUrl: slotd.baseUrl, apiKey: KEYS.burst, onRetry: (i) => retries.push(i) });
  const answers = [];
  for (let i = 0; i < 6; i++) answers.push(await client.me());
  assert.deepEqual(answers, Array(6).fill({ tenant: 'burst', admin: false }), 'every call got through in the end');
  assert.ok(retries.length >= 1, 'some were refused first');
  for (const r of retries) {
    assert.equal(r.status, 429);
    assert.equal(r.delayMs, 1_000, 'waited what Retry-After said');
    assert.equal(r.error.retryAfter, 1);
    assert.equal(r.method, 'GET');
  }
});

/**
 * A request slotd has admitted and is still reading: its headers sent, its body not. It holds
 * one of the `max_concurrent_requests` until `release()`, unless slotd answered it at once
 * (`answered`: refused because it came in while another request was in flight).
 */
function slowRequest() {
  const socket = connect(slotd.port, '127.0.0.1');
  const held = { answered: false, release: () => socket.destroy() };
  socket.on('error', () => {});
  socket.on('data', () => {
    held.answered = true;
  });
  socket.write(
    'POST /v1/tasks/fixture HTTP/1.1\r\n' +
      `Host: 127.0.0.1:${slotd.port}\r\n` +
      `Authorization: Bearer ${KEYS.holder}\r\n` +
      'Content-Type: application/json\r\n' +
      'Content-Length: 1000\r\n\r\n{"payload":',
  );
  return held;
}

test('503: past max_concurrent_requests slotd answers Retry-After at once, and the client retries then', async () => {
  const holders = Array.from({ length: MAX_IN_FLIGHT }, slowRequest);
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    for (const h of holders) h.release();
  };
  try {
    // The holders are admitted (each holds a permit while slotd waits for its body) once a
    // request of another tenant is refused for them.
    const probe = new SlotdClient({ baseUrl: slotd.baseUrl, apiKey: KEYS.probe, maxRetries: 0 });
    let last = 'nothing yet';
    const busy = await eventually(
      () => `slotd saturated by the held requests (the probe's last answer: ${last})`,
      async () => {
        // A holder that raced the probe (or its own rate limit) was answered: send it again.
        holders.forEach((h, i) => {
          if (h.answered) holders[i] = slowRequest();
        });
        const e = await probe.pools().then(() => undefined, (e) => e);
        last = e ? e.message : '200';
        return e instanceof SlotdError && e.status === 503 ? e : undefined;
      },
    );
    assert.equal(busy.type, 'urn:slotd:problem:overloaded');
    assert.equal(busy.title, 'Server busy');
    assert.equal(busy.retryAfter, 1);

    const retries = [];
    const client = new SlotdClient({
      baseUrl: slotd.baseUrl,
      apiKey: KEYS.teamA,
      onRetry: (info) => {
        retries.push(info);
        // The refusal came; the load goes away while the client waits out Retry-After.
        release();
      },
    });
    const accepted = await client.submit('fixture', { count: 1 }, { idempotencyKey: 'after-a-503' });
    assert.equal(accepted.status, 'pending');
    assert.equal(retries.length, 1);
    assert.equal(retries[0].status, 503);
    assert.equal(retries[0].delayMs, 1_000);
    assert.equal(retries[0].method, 'POST');
    assert.equal(retries[0].error.type, 'urn:slotd:problem:overloaded');
    const view = await client.get(accepted.task_id);
    assert.equal(view.idempotency_key, 'after-a-503', 'the retried submit created the task, once');
    assert.equal((await client.submit('fixture', { count: 1 }, { idempotencyKey: 'after-a-503' })).task_id, accepted.task_id);
    await client.wait(accepted.task_id, { timeoutMs: 30_000 });
  } finally {
    release();
  }
});
