import type {
  Accepted,
  DeadlinePolicy,
  EventsPage,
  HandlerVersionRow,
  HandlerView,
  Me,
  PoolView,
  ReleaseList,
  Retried,
  RouteView,
  TaskEvents,
  TaskList,
  TaskStatus,
  TaskSummary,
  TaskView,
  TaskWebhooks,
  TimelineView,
  UnitEvent,
  UnitStatus,
  UsageView,
  VersionRecord,
  WebhookList,
} from './models.js';
import type { SlotdError } from './errors.js';

/** Called before a request answered 429 or 503 is sent again. */
export interface RetryInfo {
  /** The attempt that was refused (1 for the first request). */
  attempt: number;
  /** 429 or 503. */
  status: number;
  /** How long the client waits before the next attempt (`Retry-After`, else 250 ms doubling per retry, at most 5 s, jittered down to half). */
  delayMs: number;
  method: string;
  url: string;
  error: SlotdError;
}

export interface SlotdClientOptions {
  /** The API's base URL (default `http://127.0.0.1:8080`). */
  baseUrl?: string;
  /** An API key from `[[api_keys]]`, sent as `Authorization: Bearer …`; none on the loopback default. */
  apiKey?: string;
  /** The fetch to use (default `globalThis.fetch`). */
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
  /**
   * Retries of a request answered 429 or 503, after its `Retry-After` (default 3; 0: none). A 503
   * `timeout` (or a 503 not from slotd) is retried only for a request safe to repeat: GET, HEAD,
   * PUT, DELETE, a cancel, a submit with an `idempotencyKey` (docs/api.md, "Client retry
   * policy"). Nothing else is retried.
   */
  maxRetries?: number;
  /** The longest `Retry-After` the client waits out (default 60000); a longer one throws at once, carrying `retryAfter`. */
  maxRetryDelayMs?: number;
  /** Give up on one attempt of a request with no answer after this long (default: no limit; slotd's own request deadline is 30 s). */
  timeoutMs?: number;
  /** Headers added to every request. */
  headers?: Record<string, string>;
  /** Told of each retry after 429/503, before the wait. */
  onRetry?: (info: RetryInfo) => void;
}

/** Options every call takes. */
export interface CallOptions {
  /** Abort the call (and any wait for a retry). */
  signal?: AbortSignal;
}

export interface SubmitOptions extends CallOptions {
  /** A repeat with the same key (per tenant) answers the task it already created. */
  idempotencyKey?: string;
  /** Higher runs first within the tenant's fair share, -1000 to 1000 (default 0). */
  priority?: number;
  /** Where the completion webhook goes (a public http(s) URL unless `[webhooks] allow_private`). */
  callbackUrl?: string;
  /** Complete by this time (a Date, or RFC 3339 text). */
  deadline?: Date | string;
  /** Be submitted by this time (a Date, or RFC 3339 text). */
  startBy?: Date | string;
  /** `refuse` (default) or `best_effort`. */
  deadlinePolicy?: DeadlinePolicy;
}

export interface GetOptions extends CallOptions {
  /** Add the full unit records (`?units=true`). */
  units?: boolean;
}

export interface ListFilter extends CallOptions {
  /** Only tasks of this type. */
  type?: string;
  /** Only tasks with a unit in this status. */
  status?: UnitStatus;
  /** Page size, 1 to 500 (default 50). */
  limit?: number;
  /** `next_cursor` of a previous page. */
  cursor?: string;
  /** Only this tenant's tasks (another tenant's needs an admin key). */
  tenant?: string;
}

export interface StreamOptions extends CallOptions {
  /** Resume after this event id (an `id` a stream gave). */
  lastEventId?: string;
  /** First wait before reconnecting a dropped stream (default 1000 ms, doubling; the server's `retry:` replaces it). */
  reconnectDelayMs?: number;
  /** The longest wait between reconnections (default 30000 ms). */
  maxReconnectDelayMs?: number;
  /**
   * Connections in a row that may fail before the stream throws a SlotdConnectionError
   * (default 10); one that delivered an event or stayed open 15 s starts the count afresh.
   */
  maxReconnects?: number;
  /** A connection silent this long (not even slotd's 15 s keep-alive) is taken as dropped (default 45000 ms). */
  idleTimeoutMs?: number;
  /** Told of each reconnection, before its wait. */
  onReconnect?: (info: ReconnectInfo) => void;
}

export interface ReconnectInfo {
  /** Failed connections in a row so far. */
  attempt: number;
  /** The id the stream resumes after. */
  lastEventId?: string;
  delayMs: number;
  /** Why the previous connection ended. */
  error?: Error;
}

/** One unit event from a live stream. */
export interface UnitMessage {
  type: 'unit';
  /** The cursor that resumes right after this event (`Last-Event-ID`). */
  id: string;
  event: UnitEvent;
}

/** The last message of a task's stream: the task has ended. */
export interface EndMessage {
  type: 'end';
  task_id: string;
  status: TaskStatus;
}

export type WatchMessage = UnitMessage | EndMessage;

export interface WaitOptions extends Omit<StreamOptions, 'lastEventId'> {
  /** Reject with SlotdTimeoutError if the task has not ended by then (default: wait as long as it takes). */
  timeoutMs?: number;
}

export interface BudgetInput extends CallOptions {
  /** The most the tenant's units may cost per period, in the provider's cost unit (0 or more). */
  limit: number;
  /** The period, like `"1h"` or `"1d"` (1 second to 366 days). */
  period: string;
}

/** Whether a task status is final (`completed`, `failed` or `cancelled`). */
export declare function isTerminal(status: TaskStatus | string): boolean;

/** The slotd API. Every method throws SlotdError for an error answer (problem+json fields on it). */
export declare class SlotdClient {
  constructor(options?: SlotdClientOptions);
  /** The API's base URL, without a trailing slash. */
  readonly baseUrl: string;

  /** Any API request (for routes without a method here): the JSON answer. */
  request<T = unknown>(
    method: string,
    path: string,
    options?: {
      query?: Record<string, string | number | boolean | undefined | null>;
      body?: unknown;
      signal?: AbortSignal;
      /** Safe to send again after a 503 `timeout` (default: true for GET, HEAD, OPTIONS, PUT, DELETE). */
      idempotent?: boolean;
    },
  ): Promise<T>;

  /** Create a task: `POST /v1/tasks/{type}` → `{task_id, status}`. */
  submit(type: string, payload: Record<string, unknown>, options?: SubmitOptions): Promise<Accepted>;
  /** A task's view: `GET /v1/tasks/{id}`. */
  get(taskId: string, options?: GetOptions): Promise<TaskView>;
  /** One page of tasks, newest first: `GET /v1/tasks`. */
  listPage(filter?: ListFilter): Promise<TaskList>;
  /** Every page from `cursor` (or the newest), following `next_cursor`. */
  listPages(filter?: ListFilter): AsyncGenerator<TaskList, void, undefined>;
  /** Every task, newest first, a page at a time. */
  list(filter?: ListFilter): AsyncGenerator<TaskSummary, void, undefined>;
  /** Cancel every unfinished unit: the task view after the cancel. */
  cancel(taskId: string, options?: CallOptions): Promise<TaskView>;
  /** Resubmit the failed units: how many were retried. */
  retry(taskId: string, options?: CallOptions): Promise<Retried>;
  /** A task's unit event log, oldest first. */
  events(taskId: string, options?: CallOptions): Promise<TaskEvents>;
  /** One page of the tenant's events after `after` (`next` of the previous page). */
  tenantEvents(options?: CallOptions & { after?: string }): Promise<EventsPage>;
  /** A task's completion webhook deliveries and every attempt. */
  webhooks(taskId: string, options?: CallOptions): Promise<TaskWebhooks>;
  /** Completion webhook deliveries across tasks, newest first. */
  listWebhooks(
    options?: CallOptions & { tenant?: string; status?: 'pending' | 'delivered' | 'failed'; limit?: number },
  ): Promise<WebhookList>;

  /** A task's events live, resuming after drops with `Last-Event-ID`; ends after `{type: "end"}`. */
  watch(taskId: string, options?: StreamOptions): AsyncGenerator<WatchMessage, void, undefined>;
  /** The tenant's events live from now on (or after `lastEventId`); ends only when `signal` aborts or the loop is left. */
  watchAll(options?: StreamOptions): AsyncGenerator<UnitMessage, void, undefined>;
  /** Wait on the live stream until the task ends; its final view, whatever the status. */
  wait(taskId: string, options?: WaitOptions): Promise<TaskView>;

  /** Every pool: slots used and maximum, accounts, quotas, spend. */
  pools(options?: CallOptions): Promise<PoolView[]>;
  /** A pool's slot occupancy over the last `minutes` (default 10, at most 60). */
  poolTimeline(pool: string, options?: CallOptions & { minutes?: number }): Promise<TimelineView>;
  /** Every route with its targets' room and recent refusals. */
  routes(options?: CallOptions): Promise<RouteView[]>;
  /** The loaded handlers. */
  handlers(options?: CallOptions & { all?: false }): Promise<HandlerView[]>;
  /** Every handler version seen, refused and quarantined ones with the reason. */
  handlers(options: CallOptions & { all: true }): Promise<VersionRecord[]>;
  /** The durable handler version history, newest first. */
  handlerHistory(options?: CallOptions & { name?: string; limit?: number }): Promise<HandlerVersionRow[]>;
  /** Published handler releases, each process's word on them, and rollouts. */
  handlerReleases(options?: CallOptions & { name?: string }): Promise<ReleaseList>;
  /** Who the API key acts for. */
  me(options?: CallOptions): Promise<Me>;
  /** Set a tenant's budget (admin). */
  setBudget(tenant: string, budget: BudgetInput): Promise<UsageView>;
  /** A tenant's budget and spending. */
  usage(tenant: string, options?: CallOptions): Promise<UsageView>;
}
