// The stub provider the fixture handler (plugins/fixture) speaks to, over HTTP: the protocol of
// slotd's own test stub (host/testkit/src/stub/mod.rs), which lives in a Rust library the
// `slotd` binary does not ship, so the Node suite serves the same protocol itself:
//
// - POST /jobs {"key", "polls", "outcome": "succeed"|"fail", "code"?, "message"?} → 200 {"id"};
//   429 when `limit` jobs are in flight; 409 {"id"} for a key already used.
// - GET /jobs/{id} → {"id", "status": "running"|"succeeded"|"failed", "code", "message", "url"}:
//   `running` to its first `polls` polls, ended on the next one (unless jobs are held).
// - GET /jobs/by-key/{key} → the job created with that key, or 404.
// - GET /files/{id} → 4 KiB derived from the id (sha256 chained), as the Rust stub serves.
//
// `hold(true)` keeps every running job running until `hold(false)`: a test's way to have jobs
// in flight across a moment it chooses, whatever the machine's speed.

import { createHash } from 'node:crypto';
import { createServer } from 'node:http';

const FILE_BYTES = 4 * 1024;

export function fileBytes(id) {
  const out = Buffer.alloc(FILE_BYTES);
  let block = createHash('sha256').update(id).digest();
  let filled = 0;
  while (filled < FILE_BYTES) {
    block.copy(out, filled);
    filled += block.length;
    block = createHash('sha256').update(block).digest();
  }
  return out;
}

export async function startStubProvider({ limit = 20 } = {}) {
  const jobs = new Map();
  const byKey = new Map();
  const stats = { creates: 0, polls: 0, downloads: 0, inFlight: 0, capacityRefusals: 0 };
  let nextId = 1;
  let held = false;
  let base = '';

  const send = (res, status, body) => {
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    res.writeHead(status, { 'content-type': typeof body === 'string' ? 'text/plain' : 'application/json' });
    res.end(text);
  };
  const view = (job) => ({
    id: job.id,
    status: job.status,
    code: job.status === 'failed' ? (job.code ?? 'failed') : null,
    message: job.status === 'failed' ? (job.message ?? 'the job failed') : null,
    url: job.status === 'succeeded' ? `${base}/files/${job.id}` : null,
  });

  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const path = new URL(req.url, 'http://stub').pathname;
      if (req.method === 'POST' && path === '/jobs') {
        let body;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          return send(res, 400, { error: 'body is not JSON' });
        }
        if (byKey.has(body.key)) return send(res, 409, { id: byKey.get(body.key) });
        if (stats.inFlight >= limit) {
          stats.capacityRefusals++;
          return send(res, 429, { error: 'over capacity', limit });
        }
        const id = `job-${nextId++}`;
        jobs.set(id, {
          id,
          status: 'running',
          pollsLeft: body.polls ?? 0,
          fails: body.outcome === 'fail',
          code: body.code ?? null,
          message: body.message ?? null,
        });
        byKey.set(body.key, id);
        stats.creates++;
        stats.inFlight++;
        return send(res, 200, { id });
      }
      let m = /^\/jobs\/by-key\/(.+)$/.exec(path);
      if (req.method === 'GET' && m) {
        const job = jobs.get(byKey.get(decodeURIComponent(m[1])));
        return job ? send(res, 200, view(job)) : send(res, 404, { error: 'no job with that key' });
      }
      m = /^\/jobs\/([^/]+)$/.exec(path);
      if (req.method === 'GET' && m) {
        stats.polls++;
        const job = jobs.get(decodeURIComponent(m[1]));
        if (!job) return send(res, 404, { error: 'no such job' });
        if (job.status === 'running' && !held) {
          if (job.pollsLeft === 0) {
            job.status = job.fails ? 'failed' : 'succeeded';
            stats.inFlight--;
          } else {
            job.pollsLeft--;
          }
        }
        return send(res, 200, view(job));
      }
      m = /^\/files\/([^/]+)$/.exec(path);
      if (req.method === 'GET' && m) {
        const id = decodeURIComponent(m[1]);
        if (!jobs.has(id)) return send(res, 404, 'no such job');
        stats.downloads++;
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        return res.end(fileBytes(id));
      }
      return send(res, 404, { error: `no route ${req.method} ${path}` });
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  base = `http://127.0.0.1:${port}`;
  return {
    baseUrl: base,
    host: `127.0.0.1:${port}`,
    stats,
    /** Keep running jobs running (`true`) until released (`false`). */
    hold(on) {
      held = on;
    },
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
