// A provider handler end to end: the real kling-video handler against the Kling simulator
// (`slotd sim kling`, time compressed), a route over it, and the operator calls: pools and a
// pool's timeline, routes, handlers (loaded, every version, history, releases), who the caller
// is, a tenant's budget and usage.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { SlotdClient, SlotdError } from '../src/index.js';
import { FAST_SCHEDULER, klingSections, startKlingSim, startSlotd } from './support/slotd.js';

let dir;
let sim;
let slotd;
let client;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'slotd-client-ts-kling-'));
  sim = await startKlingSim({ dir });
  slotd = await startSlotd({
    name: 'kling',
    handlers: ['kling-video'],
    expectTypes: ['video'],
    config: `${FAST_SCHEDULER}
${klingSections(sim)}

[routes.clip]
policy = "ordered"
targets = [{ handler = "kling-video", model = "kling-v1-6" }]
`,
  });
  client = new SlotdClient({ baseUrl: slotd.baseUrl });
});
after(async () => {
  await slotd?.stop();
  await sim?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const video = (shots) => ({
  model_name: 'kling-v1-6',
  mode: 'std',
  duration: '5',
  aspect_ratio: '16:9',
  shots: Array.from({ length: shots }, (_, i) => ({ prompt: `shot ${i}: a cat walks along a wall` })),
});

async function problem(promise) {
  const e = await promise.then(
    (v) => assert.fail(`expected an error answer, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(e instanceof SlotdError, `expected a SlotdError, got ${e?.stack ?? e}`);
  return e;
}

test('me: the loopback default acts for the local tenant, as an admin', async () => {
  assert.deepEqual(await client.me(), { tenant: 'local', admin: true });
});

test('a budget set, then Kling videos made through the handler and through a route, then usage', async () => {
  const set = await client.setBudget('local', { limit: 1000, period: '1d' });
  assert.equal(set.tenant, 'local');
  assert.equal(set.budget.limit, 1000);
  assert.equal(set.budget.period_ms, 86_400_000);
  assert.equal(set.budget.source, 'api');
  assert.equal(set.remaining, 1000 - set.period.spent - set.period.reserved);

  const direct = await client.submit('video', video(3), { priority: 1 });
  const routed = await client.submit('clip', {
    shots: [{ prompt: 'a lighthouse at dusk', duration: 5, aspect_ratio: '16:9' }],
  });
  const [v, r] = await Promise.all([
    client.wait(direct.task_id, { timeoutMs: 60_000 }),
    client.wait(routed.task_id, { timeoutMs: 60_000 }),
  ]);

  assert.equal(v.status, 'completed', JSON.stringify(v));
  assert.equal(v.type, 'video');
  assert.equal(v.results.length, 3);
  for (const shot of v.results) {
    assert.equal(shot.status, 'completed');
    assert.ok(shot.provider_task_id, 'the Kling task id');
    assert.match(shot.sha256, /^[0-9a-f]{64}$/);
    assert.ok(shot.bytes > 0);
    assert.ok(shot.object_key);
    assert.ok(typeof shot.cost === 'number' && shot.cost > 0, `Kling reports a cost: ${shot.cost}`);
  }
  assert.ok(v.cost > 0);

  assert.equal(r.status, 'completed', JSON.stringify(r));
  assert.equal(r.type, 'clip');
  assert.equal(r.results[0].route.route, 'clip');
  assert.equal(r.results[0].route.handler, 'kling-video');
  assert.equal(r.results[0].route.model, 'kling-v1-6');

  const usage = await client.usage('local');
  assert.equal(usage.tenant, 'local');
  assert.equal(usage.total_cost, v.cost + r.cost);
  assert.ok(usage.period.spent > 0);
  assert.equal(usage.remaining, 1000 - usage.period.spent - usage.period.reserved);
  assert.equal(usage.period.submissions, 4);
});

test('the Kling handler refuses a bad payload with 422 naming the field', async () => {
  const e = await problem(client.submit('video', { ...video(1), duration: '7' }));
  assert.equal(e.status, 422);
  assert.equal(e.type, 'urn:slotd:problem:validation');
  assert.equal(e.field, 'duration');
  assert.equal(e.detail, 'must be one of 5, 10, got "7"');
  const shot = await problem(client.submit('video', { ...video(1), shots: [{ prompt: 'x' }, { prompt: 'y', duration: '7' }] }));
  assert.equal(shot.field, 'shots[1].duration');
  // A route names the shot no target can make, and each target's reason.
  const routed = await problem(client.submit('clip', { shots: [{ prompt: 'x', duration: 7, aspect_ratio: '16:9' }] }));
  assert.equal(routed.status, 422);
  assert.equal(routed.field, 'shots[0]');
  assert.match(routed.detail, /kling-video\/kling-v1-6: duration: kling-v1-6 makes 5 or 10 second videos, not 7/);
  const budget = await problem(client.setBudget('local', { limit: -1, period: '1d' }));
  assert.equal(budget.status, 422);
  assert.equal(budget.field, 'limit');
});

test('pools and a pool timeline', async () => {
  const pools = await client.pools();
  const kling = pools.find((p) => p.name === 'kling:video');
  assert.ok(kling, `pools: ${pools.map((p) => p.name)}`);
  assert.equal(kling.max_slots, 20);
  assert.equal(kling.max_slots_source, 'config');
  assert.deepEqual(kling.handlers, ['kling-video']);
  assert.ok(kling.task_types.includes('video'));
  assert.ok(kling.units.completed >= 4, JSON.stringify(kling.units));
  assert.equal(kling.used, 0);

  const timeline = await client.poolTimeline('kling:video', { minutes: 5 });
  assert.equal(timeline.pool, 'kling:video');
  assert.equal(timeline.minutes, 5);
  assert.ok(timeline.intervals.length >= 4, 'every job that ran held a slot for a while');
  assert.ok(timeline.intervals.every((i) => i.end_ms === null || i.end_ms >= i.start_ms));
  assert.equal((await problem(client.poolTimeline('kling:video', { minutes: 61 }))).field, 'minutes');
  assert.equal((await problem(client.poolTimeline('no-such-pool'))).status, 404);
});

test('routes', async () => {
  const routes = await client.routes();
  assert.equal(routes.length, 1);
  const [clip] = routes;
  assert.equal(clip.name, 'clip');
  assert.equal(clip.policy, 'ordered');
  assert.equal(clip.pending, 0);
  assert.equal(clip.targets.length, 1);
  const [target] = clip.targets;
  assert.equal(target.handler, 'kling-video');
  assert.equal(target.model, 'kling-v1-6');
  assert.equal(target.state, 'ready');
  assert.deepEqual(target.pools.map((p) => p.name), ['kling:video']);
  assert.equal(target.free, 20);
});

test('handlers: loaded, every version seen, history, releases', async () => {
  const loaded = await client.handlers();
  assert.deepEqual(loaded.map((h) => h.name), ['kling-video']);
  const [h] = loaded;
  assert.equal(h.state, 'active');
  assert.deepEqual(h.task_types.map((t) => t.name), ['video']);
  assert.match(h.sha256, /^[0-9a-f]{64}$/);
  assert.equal(h.features.costs, true);
  assert.equal(h.features.routes, true);

  const all = await client.handlers({ all: true });
  const record = all.find((v) => v.sha256 === h.sha256);
  assert.ok(record, 'the loaded version is among every version seen');
  assert.equal(record.state, 'active');
  assert.equal(record.name, 'kling-video');
  assert.ok('seen_at' in record && !('task_types' in record), 'the ?all=true shape');

  const history = await client.handlerHistory({ name: 'kling-video', limit: 10 });
  assert.ok(history.length >= 1);
  assert.equal(history[0].sha256, h.sha256);
  assert.equal(history[0].name, 'kling-video');

  // A file in the plugins directory is published as a release of its own.
  const { releases, processes, rollouts } = await client.handlerReleases({ name: 'kling-video' });
  assert.equal(releases.length, 1);
  assert.equal(releases[0].sha256, h.sha256);
  assert.equal(releases[0].current, true);
  assert.equal(releases[0].published_by, 'plugins:kling-video.wasm');
  assert.deepEqual(releases[0].processes.map((p) => p.state), ['loaded']);
  assert.equal(processes.length, 1, 'one process heard from');
  assert.deepEqual(rollouts, []);
});
