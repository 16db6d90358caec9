// The package as a user gets it: `npm install ./clients/typescript` from a checkout, and the
// tarball `npm pack` makes, each installed into a fresh project (no network: there are no
// runtime dependencies), imported by name, with its types alongside.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const PKG = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const manifest = JSON.parse(readFileSync(join(PKG, 'package.json'), 'utf8'));
const scratch = mkdtempSync(join(tmpdir(), 'slotd-client-ts-pkg-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function npm(args, cwd) {
  return execFileSync('npm', [...args, '--no-audit', '--no-fund', '--offline', '--loglevel=error'], {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, npm_config_update_notifier: 'false' },
  });
}

function project(name) {
  const dir = join(scratch, name);
  execFileSync('mkdir', ['-p', dir]);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
  return dir;
}

const CHECK = `
import { SlotdClient, SlotdError, verifyWebhookAsync } from '@slotd/client';
import { verifyWebhook, signWebhook } from '@slotd/client/webhooks';
const c = new SlotdClient({ baseUrl: 'http://127.0.0.1:1' });
const sig = signWebhook('whsec_dGVzdA==', 'msg_1', 1, '{}');
const ok = verifyWebhook('whsec_dGVzdA==', { 'webhook-id': 'msg_1', 'webhook-timestamp': '1', 'webhook-signature': sig }, '{}', { now: 1000 });
console.log(JSON.stringify({ base: c.baseUrl, error: typeof SlotdError, web: typeof verifyWebhookAsync, ok }));
`;

test('the manifest: ESM, types in exports, Node 20+, no runtime dependencies', () => {
  assert.equal(manifest.type, 'module');
  assert.equal(manifest.engines.node, '>=20');
  assert.equal(manifest.dependencies, undefined, 'no runtime dependencies');
  for (const entry of ['.', './webhooks']) {
    const e = manifest.exports[entry];
    assert.ok(e.types && existsSync(join(PKG, e.types)), `${entry} has its types`);
    assert.ok(existsSync(join(PKG, e.default)), `${entry} has its module`);
  }
  const index = readFileSync(join(PKG, 'src', 'index.js'), 'utf8') + readFileSync(join(PKG, 'src', 'client.js'), 'utf8');
  assert.doesNotMatch(index, /from 'node:/, 'the main entry imports nothing of Node (it runs in browsers)');
});

test('npm install ./clients/typescript in a fresh project: import by name and use it', () => {
  const dir = project('from-checkout');
  npm(['install', PKG], dir);
  const out = execFileSync('node', ['--input-type=module', '-e', CHECK], { cwd: dir, encoding: 'utf8' });
  assert.deepEqual(JSON.parse(out), { base: 'http://127.0.0.1:1', error: 'function', web: 'function', ok: {} });
});

test('the packed tarball holds the sources, the types and the README, and nothing else', () => {
  const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', scratch], PKG));
  const files = packed.files.map((f) => f.path).sort();
  for (const f of ['README.md', 'package.json', 'src/index.js', 'src/index.d.ts', 'src/client.js', 'src/client.d.ts',
    'src/models.d.ts', 'src/results.d.ts', 'src/webhooks.js', 'src/webhooks.d.ts', 'src/sse.js']) {
    assert.ok(files.includes(f), `${f} is packed (files: ${files})`);
  }
  assert.deepEqual(files.filter((f) => !f.startsWith('src/') && !['README.md', 'package.json'].includes(f)), []);

  const dir = project('from-tarball');
  npm(['install', join(scratch, packed.filename)], dir);
  const out = execFileSync('node', ['--input-type=module', '-e', CHECK], { cwd: dir, encoding: 'utf8' });
  assert.equal(JSON.parse(out).base, 'http://127.0.0.1:1');
  const installed = JSON.parse(readFileSync(join(dir, 'node_modules', '@slotd', 'client', 'package.json'), 'utf8'));
  assert.equal(installed.version, manifest.version);
});

test('README.md documents every public call with an example', async () => {
  const readme = readFileSync(join(PKG, 'README.md'), 'utf8');
  const examples = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]).join('\n');
  const { SlotdClient } = await import('../src/index.js');
  const methods = Object.getOwnPropertyNames(SlotdClient.prototype).filter((m) => m !== 'constructor' && m !== 'baseUrl');
  const exported = [
    ...Object.keys(await import('../src/index.js')),
    ...Object.keys(await import('../src/webhooks.js')),
  ].filter((name) => !['SlotdClient', 'DEFAULT_TOLERANCE_SECONDS'].includes(name));
  const missing = [];
  for (const name of new Set([...methods, ...exported])) {
    const documented = new RegExp('^#{2,3} .*`' + name + '[`(]', 'm').test(readme) || readme.includes('`' + name + '`');
    const shown = new RegExp(`\\b${name}\\b`).test(examples);
    if (!documented || !shown) missing.push(`${name}${documented ? '' : ' (no heading or mention)'}${shown ? '' : ' (no example)'}`);
  }
  assert.deepEqual(missing, [], 'every public call has its section and an example in README.md');
  assert.ok(methods.length >= 20, `the client's methods: ${methods}`);
});
