// The event-stream parser on byte streams cut at awkward places: what a real connection does to
// slotd's stream when a chunk boundary falls inside a line, a CRLF, or a UTF-8 character. (The
// live streams themselves are exercised against a real slotd in tasks.test.js.)

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parseEventStream } from '../src/sse.js';

function streamOf(chunks) {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(typeof c === 'string' ? encoder.encode(c) : c);
      controller.close();
    },
  });
}

async function collect(chunks, hooks) {
  const out = [];
  for await (const m of parseEventStream(streamOf(chunks), hooks)) out.push(m);
  return out;
}

test('events, ids and multi-line data, whatever the chunking', async () => {
  const text =
    '\uFEFF: keep-alive\n\n' +
    'event: unit\r\nid: 1.2.3\r\ndata: {"a":1}\r\n\r\n' +
    'event: unit\nid: 1.2.4\ndata: {"b":\ndata: 2}\n\n' +
    'data:no space\r\r' +
    'event: end\ndata: {"status":"completed"}\n\n';
  const bytes = new TextEncoder().encode(text);
  const expected = [
    { event: 'unit', data: '{"a":1}', lastEventId: '1.2.3', hasId: true },
    { event: 'unit', data: '{"b":\n2}', lastEventId: '1.2.4', hasId: true },
    { event: 'message', data: 'no space', lastEventId: '1.2.4', hasId: false },
    { event: 'end', data: '{"status":"completed"}', lastEventId: '1.2.4', hasId: false },
  ];
  // Every split point, including inside the BOM, inside "\r\n" and inside "\r\r".
  for (let cut = 0; cut <= bytes.length; cut++) {
    const got = await collect([bytes.slice(0, cut), bytes.slice(cut)]);
    assert.deepEqual(got, expected, `split at byte ${cut}`);
  }
  // One byte at a time.
  assert.deepEqual(await collect([...bytes].map((b) => new Uint8Array([b]))), expected);
});

test('a multi-byte character split across chunks arrives whole', async () => {
  const bytes = new TextEncoder().encode('data: 镜头 7 ✓\n\n');
  for (let cut = 6; cut < bytes.length - 2; cut++) {
    const [m] = await collect([bytes.slice(0, cut), bytes.slice(cut)]);
    assert.equal(m.data, '镜头 7 ✓', `split at byte ${cut}`);
  }
});

test('retry fields, comments and an unterminated last event', async () => {
  const retries = [];
  let activity = 0;
  const got = await collect(['retry: 750\n', ': ping\n\n', 'retry: x\n', 'data: cut off'], {
    onRetry: (ms) => retries.push(ms),
    onActivity: () => activity++,
  });
  assert.deepEqual(got, [], 'an event without its blank line is not dispatched');
  assert.deepEqual(retries, [750], 'only a number is a retry');
  assert.equal(activity, 4, 'every chunk, comments included, counts as activity');
});
