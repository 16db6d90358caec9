// SlotdClient: the slotd API over fetch. No dependencies beyond the platform (Node 20+,
// browsers, edge runtimes): fetch, ReadableStream, TextDecoder, AbortController, URL.
//
// Retries (docs/api.md, "Client retry policy"; the Python client keeps the same one): a 429,
// and a 503 `overloaded` or `unavailable`, are retried after their `Retry-After` whatever the
// request (slotd refused it before doing anything). Any other 503 (`timeout`: the request ran
// past slotd's deadline and may have been carried out; or a proxy's 503) is retried only for a
// request that is safe to repeat: GET, HEAD, PUT, DELETE, a cancel, a submit with an
// `idempotencyKey`. So a submit without a key is never sent twice. At most `maxRetries`
// retries; nothing else is retried (no other status, no request that got no answer). The live
// streams (`watch`, `watchAll`) reconnect after a dropped connection with `Last-Event-ID`, so
// no event is missed or repeated.

import { SlotdConnectionError, SlotdError, SlotdTimeoutError } from './errors.js';
import { parseEventStream } from './sse.js';

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

/** The 503 problem types slotd answers before doing anything with a request (nothing stored). */
const REFUSED_503 = new Set(['urn:slotd:problem:overloaded', 'urn:slotd:problem:unavailable']);

/** Methods whose repeat does what one request does (RFC 9110 idempotent methods). */
const IDEMPOTENT_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE']);

/**
 * Whether an error answer is sent again (retries and waits permitting): a 429, or a 503 that
 * proves nothing was done, always; any other 503 only when repeating the request is harmless.
 */
function retryable(status, problemType, idempotent) {
  if (status === 429) return true;
  if (status === 503) return idempotent || REFUSED_503.has(problemType);
  return false;
}

/**
 * The wait before retry `n` (from 1) when the answer carried no `Retry-After`: 250 ms doubling
 * per retry, at most 5 s, jittered down to as little as half.
 */
function backoffMs(n) {
  const ceiling = Math.min(5_000, 250 * 2 ** (n - 1));
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** How often slotd sends a keep-alive comment on an idle stream. */
const KEEP_ALIVE_MS = 15_000;

/** Whether a task status is final (`completed`, `failed` or `cancelled`). */
export function isTerminal(status) {
  return TERMINAL.has(status);
}

function requireText(name, value) {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string, got ${JSON.stringify(value)}`);
  }
  return value;
}

function isPlainObject(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function seg(value) {
  return encodeURIComponent(value);
}

function rfc3339(name, value) {
  if (value === undefined || value === null) return value;
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw new TypeError(`${name} is an invalid Date`);
    return value.toISOString();
  }
  if (typeof value === 'string') return value;
  throw new TypeError(`${name} must be a Date or an RFC 3339 string, got ${typeof value}`);
}

/** `Retry-After` in seconds (delta-seconds or an HTTP date); undefined when absent or unreadable. */
function parseRetryAfter(header) {
  if (header === null || header === undefined) return undefined;
  const text = header.trim();
  if (/^[0-9]+$/.test(text)) return Number(text);
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, (at - Date.now()) / 1000);
}

/** Resolve after `ms`, or reject with the signal's reason when it aborts first. */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Abort `controller` when `signal` aborts; returns the function that undoes the link. */
function link(signal, controller) {
  if (!signal) return () => {};
  if (signal.aborted) {
    controller.abort(signal.reason);
    return () => {};
  }
  const onAbort = () => controller.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  return () => signal.removeEventListener('abort', onAbort);
}

async function problemOf(response) {
  let text = '';
  try {
    text = await response.text();
  } catch {
    // The body could not be read: the status alone speaks.
  }
  let body;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
  }
  if (isPlainObject(body)) return body;
  return {
    type: 'about:blank',
    title: response.statusText || `HTTP ${response.status}`,
    status: response.status,
    detail: text.slice(0, 500),
  };
}

export class SlotdClient {
  #base;
  #apiKey;
  #fetch;
  #maxRetries;
  #maxRetryDelayMs;
  #timeoutMs;
  #headers;
  #onRetry;

  /**
   * @param {import('./client.d.ts').SlotdClientOptions} [options]
   */
  constructor(options = {}) {
    const {
      baseUrl = 'http://127.0.0.1:8080',
      apiKey,
      fetch: fetchImpl = globalThis.fetch,
      maxRetries = 3,
      maxRetryDelayMs = 60_000,
      timeoutMs,
      headers = {},
      onRetry,
    } = options;
    let url;
    try {
      url = new URL(baseUrl);
    } catch {
      throw new TypeError(`baseUrl ${JSON.stringify(baseUrl)} is not a URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError(`baseUrl must be http or https, got ${url.protocol}`);
    }
    if (typeof fetchImpl !== 'function') {
      throw new TypeError('no fetch: run on Node 20+ or a browser, or pass options.fetch');
    }
    if (!Number.isInteger(maxRetries) || maxRetries < 0) {
      throw new TypeError(`maxRetries must be an integer >= 0, got ${maxRetries}`);
    }
    if (apiKey !== undefined && (typeof apiKey !== 'string' || apiKey === '')) {
      throw new TypeError('apiKey must be a non-empty string when given');
    }
    this.#base = url.href.replace(/\/+$/, '');
    this.#apiKey = apiKey;
    // Called without a receiver: browsers refuse `fetch` called as another object's method.
    this.#fetch = (input, init) => fetchImpl(input, init);
    this.#maxRetries = maxRetries;
    this.#maxRetryDelayMs = maxRetryDelayMs;
    this.#timeoutMs = timeoutMs;
    this.#headers = { ...headers };
    this.#onRetry = onRetry;
  }

  /** The API's base URL, without a trailing slash. */
  get baseUrl() {
    return this.#base;
  }

  #url(path, query) {
    let url = this.#base + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) {
        if (v === undefined || v === null) continue;
        params.set(k, String(v));
      }
      const text = params.toString();
      if (text) url += `?${text}`;
    }
    return url;
  }

  /**
   * One request with the retry policy (the file's head): a retryable answer is sent again
   * after `Retry-After` (else the backoff), at most `maxRetries` times, and only when the wait
   * is within `maxRetryDelayMs`; any other error answer throws at once. `idempotent`: whether
   * the request may be repeated after an answer that leaves open whether it was carried out
   * (default: by its method). Resolves to the Response of a 2xx and `release`, to call once
   * its body is read: until then `signal` (and `timeoutMs`, unless `stream`) still cut it off.
   */
  async #send(method, url, { body, headers = {}, signal, stream = false, idempotent = IDEMPOTENT_METHODS.has(method) } = {}) {
    const allHeaders = { accept: 'application/json', ...this.#headers, ...headers };
    if (this.#apiKey) allHeaders.authorization = `Bearer ${this.#apiKey}`;
    let payload;
    if (body !== undefined) {
      allHeaders['content-type'] = 'application/json';
      payload = JSON.stringify(body);
    }
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      const controller = new AbortController();
      const unlink = link(signal, controller);
      const state = { timedOut: false };
      const timer =
        this.#timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              state.timedOut = true;
              controller.abort(new SlotdConnectionError(`${method} ${url}: no answer within ${this.#timeoutMs} ms`));
            }, this.#timeoutMs);
      const release = () => {
        clearTimeout(timer);
        unlink();
      };
      let response;
      try {
        response = await this.#fetch(url, {
          method,
          headers: allHeaders,
          body: payload,
          signal: controller.signal,
        });
      } catch (cause) {
        release();
        if (signal?.aborted) throw signal.reason;
        if (state.timedOut) throw controller.signal.reason;
        const why = cause?.cause?.message ?? cause?.message ?? String(cause);
        throw new SlotdConnectionError(`${method} ${url}: ${why}`, { cause });
      }
      if (response.ok) {
        if (stream) clearTimeout(timer);
        return { response, release, state, controller };
      }

      let problem;
      try {
        problem = await problemOf(response);
      } finally {
        release();
      }
      const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
      const error = new SlotdError({
        status: response.status,
        problem,
        method,
        url,
        retryAfter,
        attempts: attempt,
      });
      if (!retryable(response.status, error.type, idempotent) || attempt > this.#maxRetries) throw error;
      const delayMs = retryAfter !== undefined ? retryAfter * 1000 : backoffMs(attempt);
      if (delayMs > this.#maxRetryDelayMs) throw error;
      this.#onRetry?.({ attempt, status: response.status, delayMs, method, url, error });
      await sleep(delayMs, signal);
    }
  }

  /**
   * Any API request, for routes this client has no method for: the JSON answer (undefined for
   * an empty one). Errors and retries as for every other call; `idempotent` says whether the
   * request may be sent again after an answer that leaves open whether it was carried out (a
   * 503 `timeout`): by default true for GET, HEAD, OPTIONS, PUT and DELETE, false for POST and
   * PATCH.
   *
   * @param {string} method
   * @param {string} path  starting with `/`, e.g. `/v1/me`
   * @param {{ query?: Record<string, unknown>, body?: unknown, signal?: AbortSignal, idempotent?: boolean }} [options]
   */
  async request(method, path, { query, body, signal, idempotent } = {}) {
    requireText('method', method);
    if (typeof path !== 'string' || !path.startsWith('/')) {
      throw new TypeError(`path must start with "/", got ${JSON.stringify(path)}`);
    }
    if (idempotent !== undefined && typeof idempotent !== 'boolean') {
      throw new TypeError(`idempotent must be a boolean when given, got ${JSON.stringify(idempotent)}`);
    }
    const upper = method.toUpperCase();
    const { response, release, state, controller } = await this.#send(upper, this.#url(path, query), {
      body,
      signal,
      idempotent: idempotent ?? IDEMPOTENT_METHODS.has(upper),
    });
    let text;
    try {
      text = response.status === 204 ? '' : await response.text();
    } catch (cause) {
      if (signal?.aborted) throw signal.reason;
      if (state.timedOut) throw controller.signal.reason;
      throw new SlotdConnectionError(`${method} ${response.url || path}: the answer broke off: ${cause?.message ?? cause}`, { cause });
    } finally {
      release();
    }
    if (!text) return undefined;
    const type = response.headers.get('content-type') ?? '';
    if (!/json/i.test(type)) return text;
    return JSON.parse(text);
  }

  // --- tasks -------------------------------------------------------------------------------

  /**
   * Create a task: `POST /v1/tasks/{type}`. The same `idempotencyKey` (per tenant) answers the
   * task it already created, so a submit retried after a lost answer creates nothing twice.
   * Without a key the submit is not sent again after a 503 `timeout` (it may have been stored).
   */
  async submit(type, payload, options = {}) {
    requireText('type', type);
    if (!isPlainObject(payload)) {
      throw new TypeError('payload must be a plain JSON object (the task type\'s own fields)');
    }
    const body = { payload };
    const { idempotencyKey, priority, callbackUrl, deadline, startBy, deadlinePolicy, signal } = options;
    if (idempotencyKey !== undefined) body.idempotency_key = idempotencyKey;
    if (priority !== undefined) body.priority = priority;
    if (callbackUrl !== undefined) body.callback_url = callbackUrl;
    if (deadline !== undefined) body.deadline = rfc3339('deadline', deadline);
    if (startBy !== undefined) body.start_by = rfc3339('startBy', startBy);
    if (deadlinePolicy !== undefined) body.deadline_policy = deadlinePolicy;
    // With a key a repeat answers the same task; without one a repeat could make two.
    return this.request('POST', `/v1/tasks/${seg(type)}`, { body, signal, idempotent: idempotencyKey !== undefined });
  }

  /** A task's view: `GET /v1/tasks/{id}` (`units: true` adds the unit records). */
  async get(taskId, { units, signal } = {}) {
    requireText('taskId', taskId);
    return this.request('GET', `/v1/tasks/${seg(taskId)}`, {
      query: { units: units ? 'true' : undefined },
      signal,
    });
  }

  /** One page of tasks, newest first: `GET /v1/tasks`. */
  async listPage({ type, status, limit, cursor, tenant, signal } = {}) {
    return this.request('GET', '/v1/tasks', { query: { type, status, limit, cursor, tenant }, signal });
  }

  /** Every page of tasks from `cursor` (or the newest), following `next_cursor`. */
  async *listPages(filter = {}) {
    let cursor = filter.cursor;
    for (;;) {
      const page = await this.listPage({ ...filter, cursor });
      yield page;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** Every task, newest first, fetched a page (`limit`) at a time as the loop asks for more. */
  async *list(filter = {}) {
    for await (const page of this.listPages(filter)) yield* page.tasks;
  }

  /** Cancel every unfinished unit: `POST /v1/tasks/{id}/cancel`; the task view after it. */
  async cancel(taskId, { signal } = {}) {
    requireText('taskId', taskId);
    // Cancelling twice cancels once: safe to send again.
    return this.request('POST', `/v1/tasks/${seg(taskId)}/cancel`, { signal, idempotent: true });
  }

  /** Resubmit the failed units (and store again those whose storing gave up): `POST /v1/tasks/{id}/retry`. */
  async retry(taskId, { signal } = {}) {
    requireText('taskId', taskId);
    // Twice would retry again units that failed again in between: not repeated after a timeout.
    return this.request('POST', `/v1/tasks/${seg(taskId)}/retry`, { signal, idempotent: false });
  }

  /** A task's unit event log, oldest first: `GET /v1/tasks/{id}/events`. */
  async events(taskId, { signal } = {}) {
    requireText('taskId', taskId);
    return this.request('GET', `/v1/tasks/${seg(taskId)}/events`, { signal });
  }

  /** One page of the tenant's events after `after` (`next` of the previous page): `GET /v1/events`. */
  async tenantEvents({ after, signal } = {}) {
    return this.request('GET', '/v1/events', { query: { after: after || undefined }, signal });
  }

  /** A task's completion webhook deliveries and their attempts: `GET /v1/tasks/{id}/webhooks`. */
  async webhooks(taskId, { signal } = {}) {
    requireText('taskId', taskId);
    return this.request('GET', `/v1/tasks/${seg(taskId)}/webhooks`, { signal });
  }

  /** Completion webhook deliveries across tasks, newest first: `GET /v1/webhooks`. */
  async listWebhooks({ tenant, status, limit, signal } = {}) {
    return this.request('GET', '/v1/webhooks', { query: { tenant, status, limit }, signal });
  }

  // --- live events -------------------------------------------------------------------------

  /**
   * A task's events live (`GET /v1/tasks/{id}/events` as `text/event-stream`), from its first
   * event (or after `lastEventId`), ending with `{type: "end"}` once the task has ended. A
   * dropped connection is resumed with `Last-Event-ID`: every event comes once, in order.
   * Aborting `signal` (or leaving the loop) closes the stream and ends the iteration.
   */
  async *watch(taskId, options = {}) {
    requireText('taskId', taskId);
    yield* this.#stream(`/v1/tasks/${seg(taskId)}/events`, options);
  }

  /**
   * Every event of the tenant's tasks live (`GET /v1/events` as `text/event-stream`), from now
   * on (or after `lastEventId`), resuming after a dropped connection. It ends only when
   * `signal` aborts or the loop is left.
   */
  async *watchAll(options = {}) {
    yield* this.#stream('/v1/events', options);
  }

  async *#stream(path, options) {
    const {
      signal,
      lastEventId,
      reconnectDelayMs = 1000,
      maxReconnectDelayMs = 30_000,
      maxReconnects = 10,
      idleTimeoutMs = 45_000,
      onReconnect,
    } = options;
    const url = this.#url(path);
    let last = lastEventId ?? '';
    let delay = reconnectDelayMs;
    let failures = 0;
    let lastError;
    // Whether the last connection got anywhere: it delivered an event, or stayed open a
    // keep-alive period (a quiet stream that a proxy drops now and then is not failing).
    let progressed = false;
    for (let connection = 0; ; connection++) {
      if (signal?.aborted) return;
      if (connection > 0) {
        if (progressed) failures = 0;
        failures++;
        if (failures > maxReconnects) {
          throw new SlotdConnectionError(
            `the event stream ${url} failed ${failures} times in a row; last: ${lastError?.message}`,
            { cause: lastError },
          );
        }
        onReconnect?.({ attempt: failures, lastEventId: last || undefined, delayMs: delay, error: lastError });
        try {
          await sleep(delay, signal);
        } catch {
          return;
        }
        delay = Math.min(delay * 2, maxReconnectDelayMs);
      }
      progressed = false;
      const conn = new AbortController();
      const unlink = link(signal, conn);
      let openedAt;
      let release;
      let idle;
      const arm = () => {
        clearTimeout(idle);
        idle = setTimeout(
          () => conn.abort(new SlotdConnectionError(`no data on ${url} for ${idleTimeoutMs} ms (not even a keep-alive)`)),
          idleTimeoutMs,
        );
      };
      try {
        const headers = { accept: 'text/event-stream' };
        if (last) headers['last-event-id'] = last;
        let response;
        try {
          ({ response, release } = await this.#send('GET', url, { headers, signal: conn.signal, stream: true }));
        } catch (e) {
          if (signal?.aborted) return;
          // A refusal (bad cursor, unknown task, bad key) will not change on its own.
          if (e instanceof SlotdError && e.status !== 429 && e.status < 500) throw e;
          lastError = e;
          continue;
        }
        const type = response.headers.get('content-type') ?? '';
        if (!type.includes('text/event-stream')) {
          await response.body?.cancel();
          throw new SlotdError({
            status: response.status,
            problem: {
              type: 'about:blank',
              title: 'Not an event stream',
              status: response.status,
              detail: `expected text/event-stream, got ${JSON.stringify(type)}`,
            },
            method: 'GET',
            url,
            retryAfter: undefined,
            attempts: 1,
          });
        }
        openedAt = Date.now();
        lastError = new SlotdConnectionError(`the event stream ${url} closed before its end`);
        arm();
        for await (const message of parseEventStream(response.body, {
          onRetry: (ms) => {
            delay = ms;
          },
          onActivity: arm,
        })) {
          if (message.event === 'unit') {
            const event = JSON.parse(message.data);
            if (message.hasId) last = message.lastEventId;
            delay = reconnectDelayMs;
            progressed = true;
            // The caller's time with the event is not the connection's silence.
            clearTimeout(idle);
            yield { type: 'unit', id: message.lastEventId, event };
            arm();
          } else if (message.event === 'end') {
            const end = JSON.parse(message.data);
            yield { type: 'end', task_id: end.task_id, status: end.status };
            return;
          } else if (message.event === 'error') {
            let why = message.data;
            try {
              why = JSON.parse(message.data).message ?? why;
            } catch {
              // Not JSON: the text is the reason.
            }
            lastError = new SlotdConnectionError(`slotd ended the event stream ${url}: ${why}`);
            break;
          }
        }
      } catch (e) {
        if (signal?.aborted) return;
        if (e instanceof SlotdError || e instanceof SyntaxError) throw e;
        lastError =
          conn.signal.aborted && conn.signal.reason instanceof Error
            ? conn.signal.reason
            : new SlotdConnectionError(`the event stream ${url} broke: ${e?.message ?? e}`, { cause: e });
      } finally {
        clearTimeout(idle);
        unlink();
        conn.abort();
        release?.();
        if (openedAt !== undefined && Date.now() - openedAt >= KEEP_ALIVE_MS) progressed = true;
      }
    }
  }

  /**
   * Wait until a task ends, on its live stream (no polling), and resolve to its final view,
   * whatever the status (`completed`, `failed` or `cancelled`). Rejects with
   * SlotdTimeoutError after `timeoutMs`, or with the signal's reason when `signal` aborts.
   */
  async wait(taskId, options = {}) {
    requireText('taskId', taskId);
    const { timeoutMs, signal, ...streamOptions } = options;
    const controller = new AbortController();
    const unlink = link(signal, controller);
    let timedOut = false;
    let lastStatus;
    const timer =
      timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            controller.abort(new SlotdTimeoutError(taskId, timeoutMs, undefined));
          }, timeoutMs);
    try {
      const view = await this.get(taskId, { signal: controller.signal });
      lastStatus = view.status;
      if (TERMINAL.has(view.status)) return view;
      for await (const message of this.watch(taskId, { ...streamOptions, signal: controller.signal })) {
        if (message.type === 'end') {
          lastStatus = message.status;
          break;
        }
      }
      controller.signal.throwIfAborted();
      return await this.get(taskId, { signal: controller.signal });
    } catch (e) {
      if (timedOut) throw new SlotdTimeoutError(taskId, timeoutMs, lastStatus);
      if (signal?.aborted) throw signal.reason;
      throw e;
    } finally {
      clearTimeout(timer);
      unlink();
    }
  }

  // --- pools, routes, handlers, tenants ------------------------------------------------------

  /** Every pool with its slots, accounts, quotas and spend: `GET /v1/pools`. */
  async pools({ signal } = {}) {
    return this.request('GET', '/v1/pools', { signal });
  }

  /** A pool's slot occupancy over the last `minutes` (default 10, at most 60): `GET /v1/pools/{pool}/timeline`. */
  async poolTimeline(pool, { minutes, signal } = {}) {
    requireText('pool', pool);
    return this.request('GET', `/v1/pools/${seg(pool)}/timeline`, { query: { minutes }, signal });
  }

  /** Every route with its targets' room and recent refusals: `GET /v1/routes`. */
  async routes({ signal } = {}) {
    return this.request('GET', '/v1/routes', { signal });
  }

  /** The loaded handlers (`all: true`: every version seen, refused and quarantined ones too): `GET /v1/handlers`. */
  async handlers({ all, signal } = {}) {
    return this.request('GET', '/v1/handlers', { query: { all: all ? 'true' : undefined }, signal });
  }

  /** The durable handler version history, newest first: `GET /v1/handlers/history`. */
  async handlerHistory({ name, limit, signal } = {}) {
    return this.request('GET', '/v1/handlers/history', { query: { name, limit }, signal });
  }

  /** Published handler releases and each process's word on them: `GET /v1/handlers/releases`. */
  async handlerReleases({ name, signal } = {}) {
    return this.request('GET', '/v1/handlers/releases', { query: { name }, signal });
  }

  /** Who the API key acts for: `GET /v1/me`. */
  async me({ signal } = {}) {
    return this.request('GET', '/v1/me', { signal });
  }

  /** Set a tenant's budget (admin): `PUT /v1/tenants/{name}/budget`. */
  async setBudget(tenant, { limit, period, signal } = {}) {
    requireText('tenant', tenant);
    return this.request('PUT', `/v1/tenants/${seg(tenant)}/budget`, { body: { limit, period }, signal });
  }

  /** A tenant's budget, the period's spent/reserved/remaining, and all-time cost: `GET /v1/tenants/{name}/usage`. */
  async usage(tenant, { signal } = {}) {
    requireText('tenant', tenant);
    return this.request('GET', `/v1/tenants/${seg(tenant)}/usage`, { signal });
  }
}
