// The retry policy both clients share (docs/api.md, "Client retry policy"), replayed from
// clients/conformance/retry-policy.json, the file the Python suite replays too
// (clients/python/tests/test_retry_conformance.py): a local node:http server answers each
// case's requests with its scripted answers, and the case says what the server must see (how
// many requests) and what the call must end with. Above all: a create without an idempotency
// key is never sent twice after an answer that leaves open whether it was stored.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';

import { SlotdClient, SlotdConnectionError, SlotdError } from '../src/index.js';

const { cases } = JSON.parse(readFileSync(new URL('../../conformance/retry-policy.json', import.meta.url), 'utf8'));

let server;
let baseUrl;
let answers = [];
/** Each request seen: `METHOD /path`, when it came (ms), and the body's idempotency_key. */
let seen = [];

before(async () => {
  server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const at = performance.now();
      const text = Buffer.concat(chunks).toString('utf8');
      let key = null;
      try {
        key = text ? (JSON.parse(text).idempotency_key ?? null) : null;
      } catch {
        // Not JSON: no key.
      }
      const answer = answers[Math.min(seen.length, answers.length - 1)];
      seen.push({ line: `${req.method} ${req.url}`, at, key });
      if (answer.drop) {
        req.socket.destroy();
        return;
      }
      let body;
      let type;
      if (answer.problem !== undefined) {
        type = 'application/problem+json';
        body = JSON.stringify({
          type: `urn:slotd:problem:${answer.problem}`,
          title: answer.problem,
          status: answer.status,
          detail: `scripted ${answer.problem}`,
        });
      } else if (answer.text !== undefined) {
        type = 'text/html';
        body = answer.text;
      } else {
        type = 'application/json';
        body = JSON.stringify(answer.json ?? {});
      }
      res.writeHead(answer.status, { 'content-type': type, ...(answer.headers ?? {}) });
      res.end(body);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  baseUrl = `http://127.0.0.1:${server.address().port}`;
});

after(() => {
  server.closeAllConnections();
  server.close();
});

function clientFor(spec = {}) {
  const options = { baseUrl };
  if (spec.max_retries !== undefined) options.maxRetries = spec.max_retries;
  if (spec.max_retry_wait_s !== undefined) options.maxRetryDelayMs = spec.max_retry_wait_s * 1000;
  return new SlotdClient(options);
}

function call(client, spec) {
  switch (spec.op) {
    case 'submit':
      return client.submit(spec.type, spec.payload, spec.idempotency_key === null ? {} : { idempotencyKey: spec.idempotency_key });
    case 'get':
      return client.get(spec.task_id);
    case 'cancel':
      return client.cancel(spec.task_id);
    case 'retry':
      return client.retry(spec.task_id);
    case 'set_budget':
      return client.setBudget(spec.tenant, { limit: spec.limit, period: spec.period });
    case 'me':
      return client.me();
    default:
      throw new Error(`retry-policy.json: unknown op ${spec.op}`);
  }
}

for (const c of cases) {
  test(c.name, async () => {
    answers = c.answers;
    seen = [];
    const started = performance.now();
    let result;
    let error;
    try {
      result = await call(clientFor(c.client), c.call);
    } catch (e) {
      error = e;
    }
    const took = performance.now() - started;
    const { expect } = c;

    assert.deepEqual(
      seen.map((s) => s.line),
      expect.requests,
      `the requests the server saw (the call ended with ${error ? error.message : 'success'})`,
    );
    if (c.call.op === 'submit') {
      for (const s of seen) assert.equal(s.key, c.call.idempotency_key, 'every send carries the same idempotency key');
    }

    if (expect.outcome === 'ok') {
      assert.equal(error, undefined, `expected success, got ${error}`);
      assert.deepEqual(result, c.answers[Math.min(seen.length - 1, c.answers.length - 1)].json);
    } else if (expect.outcome === 'transport') {
      assert.ok(error instanceof SlotdConnectionError, `expected a SlotdConnectionError, got ${error}`);
    } else {
      assert.ok(error instanceof SlotdError, `expected a SlotdError, got ${error ?? 'success'}`);
      assert.equal(error.status, expect.outcome.status);
      assert.equal(error.type, expect.outcome.type);
      assert.equal(error.attempts, expect.requests.length);
    }

    for (const [i, least] of (expect.min_gaps_ms ?? []).entries()) {
      const gap = seen[i + 1].at - seen[i].at;
      assert.ok(gap >= least, `request ${i + 2} came ${gap.toFixed(0)} ms after request ${i + 1}, not at least ${least} ms`);
    }
    if (expect.max_call_ms !== undefined) {
      assert.ok(took <= expect.max_call_ms, `the call took ${took.toFixed(0)} ms, more than ${expect.max_call_ms} ms`);
    }
  });
}
