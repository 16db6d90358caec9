// Starting the real `slotd` binary for the suite, the way tests/e2e/support.rs does for the Rust
// end-to-end tests: a config file in a temp directory (SQLite there, the object store there, a
// plugins directory holding the real handler components), free ports, fast timings; and the
// Kling simulator (`slotd sim kling`) as a process of its own.
//
// SLOTD_BIN names the binary (default <repo>/target/debug/slotd); SLOTD_WASM_DIR the directory
// of built handler components (default <repo>/target/wasm-plugins/wasm32-wasip2/release, where
// the handlers' build puts them; the provider handlers are also found in <repo>/plugins/).

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, copyFileSync, writeFileSync, readFileSync, rmSync, openSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(here, '..', '..', '..', '..');
const TARGET = process.env.CARGO_TARGET_DIR ? resolve(REPO, process.env.CARGO_TARGET_DIR) : join(REPO, 'target');
export const SLOTD_BIN = process.env.SLOTD_BIN ? resolve(REPO, process.env.SLOTD_BIN) : join(TARGET, 'debug', 'slotd');
const WASM_DIR = process.env.SLOTD_WASM_DIR
  ? resolve(REPO, process.env.SLOTD_WASM_DIR)
  : join(TARGET, 'wasm-plugins', 'wasm32-wasip2', 'release');
/** Compiled handlers, shared by every slotd of every run (entries are keyed by content hash and renamed into place). */
const CACHE_DIR = process.env.SLOTD_TEST_CACHE_DIR ?? join(tmpdir(), `slotd-client-ts-cache-${userInfo().uid}`);

/** The Kling simulator's time scale: a 30 s to 2 min clip takes 60 to 240 ms. */
export const KLING_TIME_SCALE = 0.002;

const children = new Set();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

/**
 * Poll `check` until it returns something other than undefined/false/null, or fail after
 * `timeoutMs` naming `what` (a string, or a function giving it at that moment).
 */
export async function eventually(what, check, { timeoutMs = 20_000, intervalMs = 25 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false && value !== null) return value;
      lastError = undefined;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) {
      const said = typeof what === 'function' ? what() : what;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${said}${lastError ? ` (last error: ${lastError.message})` : ''}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A port nothing listens on right now. */
export async function freePort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

/** The built component of handler crate `name` (`fixture`, `kling-video`, …). */
export function builtHandler(name) {
  const candidates = [join(WASM_DIR, `${name.replaceAll('-', '_')}.wasm`), join(REPO, 'plugins', `${name}.wasm`)];
  const found = candidates.find((p) => existsSync(p));
  if (!found) {
    throw new Error(
      `handler component ${name} not found (looked at ${candidates.join(', ')}): build the handlers with ` +
        '`cargo build -p slotd-handlers` (or `cargo test --workspace --no-run`), or set SLOTD_WASM_DIR',
    );
  }
  return found;
}

function requireBinary() {
  if (!existsSync(SLOTD_BIN)) {
    throw new Error(`the slotd binary is not at ${SLOTD_BIN}: build it with \`cargo build -p slotd\`, or set SLOTD_BIN`);
  }
}

function tail(file, lines = 40) {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function spawnLogged(args, logFile) {
  requireBinary();
  const fd = openSync(logFile, 'a');
  // The config file says everything: no SLOTD_* variable of the caller's may override it.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLOTD_')));
  const child = spawn(SLOTD_BIN, args, {
    stdio: ['ignore', fd, fd],
    env: { ...env, SLOTD_LOG: 'warn' },
  });
  closeSync(fd);
  children.add(child);
  child.exitedPromise = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
  child.exitedPromise.then(() => children.delete(child));
  return child;
}

async function stopChild(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await child.exitedPromise;
  clearTimeout(timer);
}

/** GET `url` and say whether it answered 2xx (false for no answer at all). */
async function answers(url) {
  try {
    const r = await fetch(url);
    await r.arrayBuffer();
    return r.ok;
  } catch {
    return false;
  }
}

/**
 * `slotd sim kling` on a free port, time compressed; resolves once `GET /_sim/stats` answers.
 */
export async function startKlingSim({ dir, accessKey = 'AK', secretKey = 'SK', seed = 7 } = {}) {
  const port = await freePort();
  const logFile = join(dir, 'kling-sim.log');
  const child = spawnLogged(
    [
      'sim', 'kling',
      '--listen', `127.0.0.1:${port}`,
      '--concurrency', '20',
      '--time-scale', String(KLING_TIME_SCALE),
      '--access-key', accessKey,
      '--secret-key', secretKey,
      '--seed', String(seed),
      '--long-tail-rate', '0',
    ],
    logFile,
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  try {
    await eventually(
      () => `the Kling simulator on ${baseUrl} (log ${logFile}:\n${tail(logFile)})`,
      async () => {
        if (child.exitCode !== null) throw new Error(`it exited with ${child.exitCode}: ${tail(logFile)}`);
        return answers(`${baseUrl}/_sim/stats`);
      },
      { timeoutMs: 30_000 },
    );
  } catch (e) {
    await stopChild(child);
    throw e;
  }
  return { baseUrl, host: `127.0.0.1:${port}`, accessKey, secretKey, stop: () => stopChild(child) };
}

/** TOML text of a string. */
export function toml(value) {
  return JSON.stringify(value);
}

/**
 * Start `slotd serve` with a config file of its own in a fresh temp directory.
 *
 * @param {object} options
 * @param {string[]} options.handlers   handler crates whose components go into plugins/ (e.g. ['fixture', 'kling-video'])
 * @param {string} options.config       TOML sections after the top-level keys
 * @param {string[]} [options.expectTypes]  task types that must be served before the server counts as up
 * @param {string} [options.apiKey]     an admin key to ask with while waiting (when the config has [[api_keys]])
 */
export async function startSlotd({ handlers, config, expectTypes = [], apiKey, name = 'slotd' }) {
  const dir = mkdtempSync(join(tmpdir(), `slotd-client-ts-${name}-`));
  const plugins = join(dir, 'plugins');
  mkdirSync(plugins);
  mkdirSync(CACHE_DIR, { recursive: true });
  for (const h of handlers) copyFileSync(builtHandler(h), join(plugins, `${h}.wasm`));
  const port = await freePort();
  const text = [
    `listen = ${toml(`127.0.0.1:${port}`)}`,
    `database_url = ${toml(`sqlite://${join(dir, 'slotd.db')}`)}`,
    `plugins_dir = ${toml(plugins)}`,
    `object_store = ${toml(`file://${join(dir, 'objects')}`)}`,
    `cache_dir = ${toml(CACHE_DIR)}`,
    '',
    config,
  ].join('\n');
  const configFile = join(dir, 'slotd.toml');
  writeFileSync(configFile, text);
  const logFile = join(dir, 'slotd.log');
  const child = spawnLogged(['serve', '--config', configFile], logFile);
  const baseUrl = `http://127.0.0.1:${port}`;
  const headers = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  // Up means: it answers, and every expected task type is served (handlers compile at start:
  // the first run of a debug build takes a while, later runs load them from the cache).
  const served = new Set();
  try {
    await eventually(
      () =>
        `slotd on ${baseUrl} serving ${expectTypes.join(', ') || 'requests'} (serving: ${[...served].join(', ') || 'nothing yet'}; ` +
        `log ${logFile}:\n${tail(logFile)})`,
      async () => {
        if (child.exitCode !== null) throw new Error(`slotd exited with ${child.exitCode}:\n${tail(logFile)}`);
        const r = await fetch(`${baseUrl}/v1/handlers`, { headers });
        if (!r.ok) return false;
        for (const h of await r.json()) for (const t of h.task_types) served.add(t.name);
        return expectTypes.every((t) => served.has(t));
      },
      { timeoutMs: 180_000, intervalMs: 100 },
    );
  } catch (e) {
    await stopChild(child);
    throw e;
  }
  return {
    baseUrl,
    port,
    dir,
    logFile,
    configFile,
    log: () => tail(logFile, 80),
    async stop({ keep = false } = {}) {
      await stopChild(child);
      if (!keep && !process.env.SLOTD_TEST_KEEP) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The sections that load the fixture handler against a stub provider. */
export function fixtureSections(stub, { slots = 5 } = {}) {
  return `
[pools.fixture]
max_slots = ${slots}

[pools."fixture-b"]
max_slots = ${slots}

[handlers.fixture]
base_url = ${toml(stub.baseUrl)}
allowed_hosts = [${toml(stub.host)}]
`;
}

/** The sections that load the kling-video handler against the simulator, time compressed. */
export function klingSections(sim) {
  return `
[pools."kling:video"]
max_slots = 20

[handlers.kling-video]
base_url = ${toml(sim.baseUrl)}
access_key = ${toml(sim.accessKey)}
secret_key = ${toml(sim.secretKey)}
allowed_hosts = [${toml(sim.host)}]
expected_duration_scale = ${KLING_TIME_SCALE}
`;
}

/** Fast scheduler timings for tests (the others scale with the tick). */
export const FAST_SCHEDULER = `
[scheduler]
tick_interval = "50ms"
min_rest = "1ms"

[limits]
call_deadline = "5s"
`;
