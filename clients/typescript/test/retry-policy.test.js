// The retry policy at its edges, against a small local node:http server: what a real slotd
// cannot be made to answer on demand (a 500 or 502, a Retry-After as an HTTP date or beyond the
// client's limit, a non-JSON error page from a proxy in front of it, no answer at all). The
// real 429 and 503 from slotd itself, retried after its Retry-After, are in auth.test.js; which
// answers are retried for which request, the table both clients share, in
// retry-conformance.test.js.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';

import { SlotdClient, SlotdConnectionError, SlotdError } from '../src/index.js';
import { freePort } from './support/slotd.js';

/** A server answering each request with the next of `script` (the last one repeats). */
let server;
let baseUrl;
let script = [];
let hits = [];
before(async () => {
  server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    const step = script[Math.min(hits.length - 1, script.length - 1)];
    if (step === 'hang') return; // never answers
    res.writeHead(step.status, step.headers ?? { 'content-type': 'application/json' });
    res.end(typeof step.body === 'string' ? step.body : JSON.stringify(step.body ?? {}));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  baseUrl = `http://127.0.0.1:${server.address().port}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

function play(steps) {
  script = steps;
  hits = [];
}

const problem = (status, title) => ({
  status,
  headers: { 'content-type': 'application/problem+json' },
  body: { type: 'urn:slotd:problem:x', title, status, detail: `${title} detail` },
});

test('a 500 and a 502 are not retried', async () => {
  for (const status of [500, 502]) {
    play([problem(status, 'Internal error'), { status: 200, body: { tenant: 'x', admin: false } }]);
    const retries = [];
    const client = new SlotdClient({ baseUrl, onRetry: (i) => retries.push(i) });
    const e = await client.me().catch((e) => e);
    assert.ok(e instanceof SlotdError, `${status}: ${e}`);
    assert.equal(e.status, status);
    assert.equal(e.attempts, 1);
    assert.deepEqual(hits, ['GET /v1/me'], `${status} must be sent once`);
    assert.deepEqual(retries, []);
  }
});

test('a 429 whose Retry-After is an HTTP date is retried when that date comes', async () => {
  const at = new Date(Date.now() + 2_000);
  play([
    { ...problem(429, 'Too many requests'), headers: { 'content-type': 'application/problem+json', 'retry-after': at.toUTCString() } },
    { status: 200, body: { tenant: 'x', admin: true } },
  ]);
  const retries = [];
  const client = new SlotdClient({ baseUrl, onRetry: (i) => retries.push(i) });
  const me = await client.me();
  assert.deepEqual(me, { tenant: 'x', admin: true });
  assert.equal(hits.length, 2);
  assert.equal(retries.length, 1);
  // An HTTP date has whole seconds: the wait is the time to the second it names, 1 to 2 s (less
  // the few ms between making the date and reading the answer).
  assert.ok(retries[0].delayMs >= 950 && retries[0].delayMs <= 2_000, `waited ${retries[0].delayMs} ms`);
  assert.ok(Date.now() >= at.getTime() - 1_000, 'the retry did not come before the date (to its second)');
});

test('a Retry-After beyond maxRetryDelayMs throws at once, carrying the wait', async () => {
  play([{ ...problem(503, 'Service unavailable'), headers: { 'content-type': 'application/problem+json', 'retry-after': '120' } }]);
  const client = new SlotdClient({ baseUrl, maxRetryDelayMs: 60_000 });
  const started = Date.now();
  const e = await client.me().catch((e) => e);
  assert.ok(e instanceof SlotdError);
  assert.equal(e.status, 503);
  assert.equal(e.retryAfter, 120);
  assert.equal(hits.length, 1);
  assert.ok(Date.now() - started < 1_000, 'it did not wait');
});

test('retries are bounded by maxRetries', async () => {
  play([{ ...problem(503, 'Server busy'), headers: { 'content-type': 'application/problem+json', 'retry-after': '0' } }]);
  const client = new SlotdClient({ baseUrl, maxRetries: 2 });
  const e = await client.pools().catch((e) => e);
  assert.ok(e instanceof SlotdError);
  assert.equal(e.attempts, 3, e.message);
  assert.equal(hits.length, 3);
  assert.match(e.message, /after 3 attempts/);
});

test('an error page that is not problem+json still becomes a SlotdError with the text', async () => {
  play([{ status: 502, headers: { 'content-type': 'text/html' }, body: '<h1>Bad gateway</h1>' }]);
  const e = await new SlotdClient({ baseUrl }).pools().catch((e) => e);
  assert.ok(e instanceof SlotdError);
  assert.equal(e.type, 'about:blank');
  assert.equal(e.detail, '<h1>Bad gateway</h1>');
  assert.match(e.message, /^slotd answered 502 Bad Gateway: <h1>Bad gateway<\/h1> \[GET http:\/\/127\.0\.0\.1:\d+\/v1\/pools\]$/);
});

test('aborting during the wait for a retry rejects at once with the abort reason', async () => {
  play([{ ...problem(429, 'Too many requests'), headers: { 'content-type': 'application/problem+json', 'retry-after': '30' } }]);
  const stop = new AbortController();
  const client = new SlotdClient({
    baseUrl,
    onRetry: () => stop.abort(new Error('the user left')),
  });
  const e = await client.me({ signal: stop.signal }).catch((e) => e);
  assert.equal(e.message, 'the user left');
  assert.equal(hits.length, 1);
});

test('no answer: a client-side timeout and a refused connection are SlotdConnectionErrors naming the request', async () => {
  play(['hang']);
  const timed = await new SlotdClient({ baseUrl, timeoutMs: 200 }).routes().catch((e) => e);
  assert.ok(timed instanceof SlotdConnectionError, String(timed));
  assert.match(timed.message, /^GET http:\/\/127\.0\.0\.1:\d+\/v1\/routes: no answer within 200 ms$/);
  assert.equal(hits.length, 1, 'a request that got no answer is not retried');

  const closed = `http://127.0.0.1:${await freePort()}`;
  const refused = await new SlotdClient({ baseUrl: closed }).routes().catch((e) => e);
  assert.ok(refused instanceof SlotdConnectionError, String(refused));
  assert.match(refused.message, /ECONNREFUSED/);
  assert.ok(refused.message.startsWith(`GET ${closed}/v1/routes: `), refused.message);
});

test('bad arguments are refused before any request', async () => {
  play([{ status: 200, body: {} }]);
  const client = new SlotdClient({ baseUrl });
  assert.throws(() => new SlotdClient({ baseUrl: 'not a url' }), /baseUrl "not a url" is not a URL/);
  assert.throws(() => new SlotdClient({ baseUrl: 'ftp://x' }), /http or https/);
  await assert.rejects(client.get(''), /taskId must be a non-empty string/);
  await assert.rejects(client.submit('fixture', [1, 2]), /payload must be a plain JSON object/);
  await assert.rejects(client.submit('fixture', {}, { deadline: new Date('nope') }), /deadline is an invalid Date/);
  assert.equal(hits.length, 0);
});
