// Tasks against a real slotd: the binary with the real fixture handler (plugins/fixture) and
// its stub provider over HTTP. Submit with every option, get, list over several pages, cancel,
// retry, the event log, the live streams (a dropped connection resumed with Last-Event-ID, no
// event missed or repeated), wait with and without a timeout, and the errors slotd answers.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';

import { SlotdClient, SlotdConnectionError, SlotdError, SlotdTimeoutError, isTerminal } from '../src/index.js';
import { FAST_SCHEDULER, eventually, fixtureSections, startSlotd } from './support/slotd.js';
import { fileBytes, startStubProvider } from './support/stub-provider.js';
import { startTcpProxy } from './support/tcp-proxy.js';

let stub;
let slotd;
let client;
before(async () => {
  stub = await startStubProvider();
  slotd = await startSlotd({
    name: 'tasks',
    handlers: ['fixture'],
    expectTypes: ['fixture', 'fixture-b'],
    config: FAST_SCHEDULER + fixtureSections(stub),
  });
  client = new SlotdClient({ baseUrl: slotd.baseUrl });
});
after(async () => {
  stub?.hold(false);
  await slotd?.stop();
  await stub?.close();
});

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');

/** The problem a call rejects with. */
async function problem(promise) {
  const e = await promise.then(
    (v) => assert.fail(`expected an error answer, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(e instanceof SlotdError, `expected a SlotdError, got ${e?.stack ?? e}`);
  return e;
}

test('submit, then wait: the task completes and its results are the provider files, stored', async () => {
  const accepted = await client.submit('fixture', { count: 3, polls: 1 });
  assert.equal(accepted.status, 'pending');
  assert.match(accepted.task_id, /\S/);

  const view = await client.wait(accepted.task_id, { timeoutMs: 30_000 });
  assert.equal(view.status, 'completed');
  assert.equal(view.type, 'fixture');
  assert.equal(view.completed, 3);
  assert.equal(view.total, 3);
  assert.equal(view.tenant, 'local');
  assert.ok(isTerminal(view.status));
  assert.deepEqual(view.results.map((r) => r.index), [0, 1, 2]);
  for (const r of view.results) {
    assert.equal(r.status, 'completed');
    assert.match(r.provider_task_id, /^job-\d+$/);
    assert.equal(r.sha256, sha256(fileBytes(r.provider_task_id)), 'the stored file is the provider job\'s file');
    assert.equal(r.bytes, 4096);
    assert.ok(r.object_key);
  }

  const withUnits = await client.get(accepted.task_id, { units: true });
  assert.equal(withUnits.units.length, 3);
  assert.deepEqual(new Set(withUnits.units.map((u) => u.status)), new Set(['completed']));
  assert.equal(withUnits.units[0].task_id, accepted.task_id);
  assert.equal((await client.get(accepted.task_id)).units, undefined, 'units only when asked');

  // wait on a task that has ended answers at once, with the same view.
  assert.deepEqual((await client.wait(accepted.task_id, { timeoutMs: 2_000 })).results, view.results);
});

test('submit options: idempotency key, priority, deadline, start-by and policy are kept', async () => {
  const deadline = new Date(Date.now() + 3_600_000);
  deadline.setMilliseconds(0);
  const key = `order-${Date.now()}`;
  const options = {
    idempotencyKey: key,
    priority: 7,
    deadline,
    startBy: new Date(deadline.getTime() - 60_000).toISOString(),
    deadlinePolicy: 'best_effort',
  };
  const first = await client.submit('fixture', { count: 1 }, options);
  const again = await client.submit('fixture', { count: 1 }, options);
  assert.equal(again.task_id, first.task_id, 'the same idempotency key answers the same task');
  const other = await client.submit('fixture', { count: 1 }, { ...options, idempotencyKey: `${key}-b` });
  assert.notEqual(other.task_id, first.task_id);

  const view = await client.get(first.task_id);
  assert.equal(view.idempotency_key, key);
  assert.equal(view.priority, 7);
  assert.equal(view.deadline_at, deadline.getTime());
  assert.equal(view.start_by, deadline.getTime() - 60_000);
  assert.equal(view.deadline_policy, 'best_effort');
  await client.wait(first.task_id, { timeoutMs: 30_000 });
  await client.wait(other.task_id, { timeoutMs: 30_000 });
});

test('errors: 422 names the payload field, 400 the request field, 404 for an unknown task or type', async () => {
  const e422 = await problem(client.submit('fixture', { count: 0 }));
  assert.equal(e422.status, 422);
  assert.equal(e422.type, 'urn:slotd:problem:validation');
  assert.equal(e422.title, 'Validation failed');
  assert.equal(e422.field, 'count');
  assert.match(e422.detail, /count must be an integer from 1 to 10000, got 0/);
  assert.equal(e422.problem.field, 'count');
  assert.equal(e422.attempts, 1, 'a 422 is not retried');
  assert.match(e422.message, /^slotd answered 422 Validation failed: .*count.* \(field `count`\) \[POST http:\/\/127\.0\.0\.1:\d+\/v1\/tasks\/fixture\]$/);

  const rejected = await problem(client.submit('fixture', { reject: 'no cats allowed' }));
  assert.equal(rejected.status, 422);
  assert.equal(rejected.field, 'reject');
  assert.match(rejected.detail, /no cats allowed/);

  const e400 = await problem(client.request('POST', '/v1/tasks/fixture', { body: { payload: {}, colour: 'red' } }));
  assert.equal(e400.status, 400);
  assert.equal(e400.field, 'colour');

  const missing = await problem(client.get('no-such-task'));
  assert.equal(missing.status, 404);
  assert.equal(missing.type, 'urn:slotd:problem:not-found');
  assert.equal((await problem(client.cancel('no-such-task'))).status, 404);
  assert.equal((await problem(client.retry('no-such-task'))).status, 404);
  assert.equal((await problem(client.events('no-such-task'))).status, 404);
  const unknownType = await problem(client.submit('no-such-type', {}));
  assert.equal(unknownType.status, 404);
  assert.match(unknownType.detail, /no-such-type/);
});

test('list pages through every task, newest first, with no task twice or left out', async () => {
  const mine = [];
  for (let i = 0; i < 7; i++) mine.push((await client.submit('fixture', { count: 1 })).task_id);

  const pages = [];
  for await (const page of client.listPages({ limit: 3 })) pages.push(page);
  assert.ok(pages.length >= 3, `7 tasks or more at 3 a page is 3 pages or more, got ${pages.length}`);
  assert.ok(pages.slice(0, -1).every((p) => p.tasks.length === 3 && p.next_cursor), 'full pages carry a cursor');
  assert.ok(!pages.at(-1).next_cursor, 'the last page has none');

  const listed = [];
  for await (const task of client.list({ limit: 3 })) listed.push(task);
  const ids = listed.map((t) => t.task_id);
  assert.equal(new Set(ids).size, ids.length, 'no task twice');
  assert.deepEqual(ids, pages.flatMap((p) => p.tasks.map((t) => t.task_id)));
  const whole = await client.listPage({ limit: 500 });
  assert.deepEqual(ids, whole.tasks.map((t) => t.task_id), 'the pages together are the one big page');
  assert.deepEqual(ids.filter((id) => mine.includes(id)), [...mine].reverse(), 'newest first');
  for (let i = 1; i < listed.length; i++) assert.ok(listed[i - 1].created_at >= listed[i].created_at);

  // Filters go with every page; leaving the loop early stops fetching.
  const failedOnly = await client.listPage({ status: 'failed', type: 'fixture' });
  assert.ok(failedOnly.tasks.every((t) => t.type === 'fixture'));
  let seen = 0;
  for await (const _ of client.list({ limit: 2 })) if (++seen === 3) break;
  assert.equal(seen, 3);
  const bad = await problem(client.listPage({ cursor: 'not-a-cursor' }));
  assert.equal(bad.status, 400);
  assert.equal(bad.field, 'cursor');
  for (const id of mine) await client.wait(id, { timeoutMs: 30_000 });
});

test('cancel: units at the provider are cancelled once their jobs end', async () => {
  stub.hold(true);
  try {
    const { task_id } = await client.submit('fixture', { count: 2 });
    await eventually('both units at the provider', async () => {
      const v = await client.get(task_id);
      return v.results.every((r) => r.status === 'submitted');
    });
    const cancelled = await client.cancel(task_id);
    assert.equal(cancelled.task_id, task_id);
    assert.equal(cancelled.cancel_requested, true);
    assert.equal(cancelled.status, 'running', 'units at the provider keep their slots until their jobs end');
    stub.hold(false);
    const view = await client.wait(task_id, { timeoutMs: 30_000 });
    assert.equal(view.status, 'cancelled');
    assert.deepEqual(view.results.map((r) => r.status), ['cancelled', 'cancelled']);
    assert.equal((await client.cancel(task_id)).status, 'cancelled', 'cancelling again changes nothing');
  } finally {
    stub.hold(false);
  }
});

test('retry resubmits the failed units, and the event log says so', async () => {
  const { task_id } = await client.submit('fixture', { count: 2, behavior: 'fail', polls: 0, code: 'E42', message: 'no' });
  const failed = await client.wait(task_id, { timeoutMs: 30_000 });
  assert.equal(failed.status, 'failed');
  assert.deepEqual(failed.error, { code: 'E42', message: 'no' });
  assert.deepEqual(failed.results.map((r) => r.error), [{ code: 'E42', message: 'no' }, { code: 'E42', message: 'no' }]);

  const retried = await client.retry(task_id);
  assert.deepEqual(retried, { task_id, retried: 2 });
  const again = await client.wait(task_id, { timeoutMs: 30_000 });
  assert.equal(again.status, 'failed', 'the fixture fails them again');

  const log = await client.events(task_id);
  assert.equal(log.task_id, task_id);
  const retries = log.events.filter((e) => e.detail?.startsWith('retry requested'));
  assert.equal(retries.length, 2, `one "retry requested" per unit in ${JSON.stringify(log.events.map((e) => e.detail))}`);
  assert.equal(log.events.filter((e) => e.to_status === 'failed').length, 4, 'each unit failed twice');
  for (let i = 1; i < log.events.length; i++) assert.ok(log.events[i - 1].id < log.events[i].id, 'oldest first');
  assert.equal((await client.retry(task_id)).retried, 2);
  await client.wait(task_id, { timeoutMs: 30_000 });
});

test('the tenant event log pages with `next`', async () => {
  const head = await client.tenantEvents();
  assert.ok(Array.isArray(head.events));
  let cursor = head.next;
  // Read to the end of the log, then only what comes after.
  for (let page = head; page.events.length > 0; ) {
    page = await client.tenantEvents({ after: cursor });
    cursor = page.next;
  }
  const { task_id } = await client.submit('fixture', { count: 1 });
  await client.wait(task_id, { timeoutMs: 30_000 });
  const after = await client.tenantEvents({ after: cursor });
  assert.ok(after.events.length > 0);
  assert.deepEqual(new Set(after.events.map((e) => e.task_id)), new Set([task_id]), 'only what came after the cursor');
  const log = await client.events(task_id);
  assert.deepEqual(after.events.map((e) => e.id), log.events.map((e) => e.id));
});

test('watch: a connection dropped mid-stream resumes with Last-Event-ID; no event missed or repeated', { timeout: 60_000 }, async () => {
  const proxy = await startTcpProxy(slotd.port);
  const viaProxy = new SlotdClient({ baseUrl: proxy.baseUrl });
  stub.hold(true);
  try {
    const { task_id } = await client.submit('fixture', { count: 3 });
    const reconnects = [];
    const seen = [];
    let end;
    let outage;
    for await (const message of viaProxy.watch(task_id, {
      reconnectDelayMs: 20,
      maxReconnectDelayMs: 200,
      maxReconnects: 1_000,
      onReconnect: (info) => reconnects.push({ ...info, seenCount: seen.length }),
    })) {
      if (message.type === 'end') {
        end = message;
        break;
      }
      seen.push(message);
      const submitted = seen.filter((m) => m.event.to_status === 'submitted').length;
      if (submitted === 3 && proxy.open > 0 && !outage) {
        // Every unit is at the (held) provider and nothing more can happen until it lets go:
        // cut the connection, let the task finish while the client cannot reach slotd, and
        // only then let it reconnect. (The loop goes on meanwhile: the client's reconnection
        // attempts happen as it asks for the next event.)
        proxy.cut();
        outage = (async () => {
          stub.hold(false);
          await eventually('the task ending while the stream is cut', async () => isTerminal((await client.get(task_id)).status));
          await eventually('the client failing to reconnect at least once', () => reconnects.length >= 2);
          proxy.restore();
        })();
      }
    }
    await outage;
    assert.ok(reconnects.length >= 2, 'the stream was dropped and resumed');
    const { seenCount, lastEventId } = reconnects[0];
    assert.equal(lastEventId, seen[seenCount - 1].id, 'it resumes after the last event it had');
    assert.deepEqual(end, { type: 'end', task_id, status: 'completed' });

    const log = await client.events(task_id);
    assert.deepEqual(
      seen.map((m) => m.event),
      log.events,
      'the stream delivered exactly the task\'s event log, in order, each event once',
    );
    const ids = seen.map((m) => m.id);
    assert.equal(new Set(ids).size, ids.length, 'every resume cursor is distinct');
    const resumed = seen.slice(seenCount).map((m) => m.event.to_status);
    assert.ok(
      resumed.includes('succeeded') && resumed.includes('completed'),
      `the events committed while the stream was cut arrived after the resume: ${resumed}`,
    );
  } finally {
    stub.hold(false);
    await proxy.close();
  }
});

test('watch: a connection gone silent is taken as dropped after idleTimeoutMs, and resumed', { timeout: 60_000 }, async () => {
  const proxy = await startTcpProxy(slotd.port);
  const viaProxy = new SlotdClient({ baseUrl: proxy.baseUrl });
  stub.hold(true);
  try {
    const { task_id } = await client.submit('fixture', { count: 2 });
    const reconnects = [];
    const seen = [];
    let frozenAt;
    for await (const message of viaProxy.watch(task_id, {
      idleTimeoutMs: 300,
      reconnectDelayMs: 20,
      onReconnect: (info) => {
        // Only the drop after the freeze counts (a loaded machine may be slower than 300 ms
        // between two events before it, which resumes just the same).
        if (frozenAt) reconnects.push({ ...info, seenCount: seen.length, after: Date.now() - frozenAt });
      },
    })) {
      if (message.type === 'end') break;
      seen.push(message);
      if (!frozenAt && seen.filter((m) => m.event.to_status === 'submitted').length === 2) {
        // The connection stays open but nothing more comes through it; the task goes on.
        proxy.freeze();
        frozenAt = Date.now();
        stub.hold(false);
      }
    }
    assert.equal(reconnects.length, 1, JSON.stringify(reconnects));
    assert.match(reconnects[0].error.message, /no data on .* for 300 ms/);
    assert.ok(reconnects[0].after >= 300, `dropped ${reconnects[0].after} ms after going silent`);
    assert.equal(reconnects[0].lastEventId, seen[reconnects[0].seenCount - 1].id);
    const log = await client.events(task_id);
    assert.deepEqual(seen.map((m) => m.event), log.events, 'every event once, in order');
    assert.ok(seen.slice(reconnects[0].seenCount).some((m) => m.event.to_status === 'completed'));
  } finally {
    stub.hold(false);
    await proxy.close();
  }
});

test('watch gives up after maxReconnects failed connections in a row, saying why', { timeout: 30_000 }, async () => {
  const proxy = await startTcpProxy(slotd.port);
  try {
    const { task_id } = await client.submit('fixture-b', { behavior: 'idle' });
    proxy.cut(); // every connection through it is refused from now on
    const reconnects = [];
    const viaProxy = new SlotdClient({ baseUrl: proxy.baseUrl });
    const e = await (async () => {
      for await (const _ of viaProxy.watch(task_id, {
        reconnectDelayMs: 10,
        maxReconnects: 3,
        onReconnect: (info) => reconnects.push(info.attempt),
      })) assert.fail('no event through a cut proxy');
    })().catch((e) => e);
    assert.ok(e instanceof SlotdConnectionError, String(e));
    assert.match(e.message, new RegExp(`^the event stream ${proxy.baseUrl}/v1/tasks/${task_id}/events failed 4 times in a row; last: GET .*: `));
    assert.deepEqual(reconnects, [1, 2, 3]);
    assert.equal(proxy.accepted, 4, 'the first connection and three more');
  } finally {
    await proxy.close();
  }
});

test('watch from a cursor gives only the later events; a cursor slotd never gave is a 400 naming the header', { timeout: 60_000 }, async () => {
  const { task_id } = await client.submit('fixture', { count: 2 });
  const all = [];
  for await (const m of client.watch(task_id)) all.push(m);
  assert.equal(all.at(-1).type, 'end');
  const units = all.filter((m) => m.type === 'unit');
  const from = units[2];
  const rest = [];
  for await (const m of client.watch(task_id, { lastEventId: from.id })) rest.push(m);
  assert.deepEqual(rest, all.slice(3), 'resuming after the third event gives the fourth on');

  const bad = await problem((async () => {
    for await (const _ of client.watch(task_id, { lastEventId: 'not-a-cursor' })) assert.fail('no event for a bad cursor');
  })());
  assert.equal(bad.status, 400);
  assert.equal(bad.field, 'Last-Event-ID');
  const unknown = await problem((async () => {
    for await (const _ of client.watch('no-such-task')) assert.fail('no event for an unknown task');
  })());
  assert.equal(unknown.status, 404);
});

test('watchAll streams every task of the tenant from now on, until its signal aborts', { timeout: 60_000 }, async () => {
  const stop = new AbortController();
  const got = [];
  let opened;
  let bothCompleted;
  const seenBoth = new Promise((resolve) => {
    bothCompleted = () => {
      const done = got.filter((x) => x.event.task_id === opened && x.event.to_status === 'completed').length === 2;
      if (opened && done) resolve();
    };
  });
  const streamed = (async () => {
    for await (const m of client.watchAll({ signal: stop.signal })) {
      got.push(m);
      bothCompleted();
    }
    return 'ended';
  })();
  // The stream starts at the log's end when it connects: submit only once it is open.
  await eventually('the tenant stream open', async () => {
    const text = await (await fetch(`${slotd.baseUrl}/metrics`)).text();
    return /^slotd_event_streams_total\{[^}]*scope="tenant"[^}]*\} [1-9]/m.test(text);
  });
  opened = (await client.submit('fixture', { count: 2 })).task_id;
  bothCompleted();
  await seenBoth;
  stop.abort();
  assert.equal(await streamed, 'ended', 'aborting the signal ends the loop quietly');
  const log = await client.events(opened);
  const mine = got.filter((m) => m.event.task_id === opened).map((m) => m.event);
  assert.deepEqual(mine, log.events, 'the task\'s whole log, in order, none missed or repeated');
  assert.ok(got.every((m) => m.type === 'unit' && m.id));
});

test('wait gives up after its timeout, naming the task; a signal stops it too', { timeout: 30_000 }, async () => {
  // `idle`: accepted by the provider and running forever (pool fixture-b, kept apart).
  const { task_id } = await client.submit('fixture-b', { behavior: 'idle' });
  const started = Date.now();
  const timeout = await client.wait(task_id, { timeoutMs: 500 }).catch((e) => e);
  const took = Date.now() - started;
  assert.ok(timeout instanceof SlotdTimeoutError, String(timeout));
  assert.equal(timeout.taskId, task_id);
  assert.equal(timeout.timeoutMs, 500);
  assert.ok(['pending', 'running'].includes(timeout.lastStatus), timeout.lastStatus);
  assert.match(timeout.message, new RegExp(`^task ${task_id} did not end within 500 ms \\(its status when last seen: (pending|running)\\)$`));
  assert.ok(took >= 500 && took < 5_000, `gave up after ${took} ms`);

  const stop = new AbortController();
  const waiting = client.wait(task_id, { signal: stop.signal });
  stop.abort(new Error('shutting down'));
  await assert.rejects(waiting, /shutting down/);
});
