// Generated from openapi.json (slotd 0.1.0) by scripts/gen-models.js: do not edit.
// Run `npm run gen:models` after the document changes; test/models.test.js compares the two.

import type { TaskError, TaskResult } from './results.js';

/** What a create answers. */
export interface Accepted {
  /** `pending` for a new task; for a repeated idempotency key, where that task is now. */
  status: TaskStatus;
  task_id: string;
}

/** One provider account's share of a pool. */
export interface AccountView {
  /** What its capacity refusals taught (see the pool's `capacity`). */
  capacity?: null | EstimateView;
  /** The provider's quota refusal that closed its slot set, and until when. */
  closure?: null | Closure;
  /** Why it is drained and when it is probed next. */
  drained?: null | Drain;
  /** The limit filled to now (adaptive capacity, per account). */
  effective_max_slots: number;
  /** Its limit in this pool: the configured one, or the provider's when it published less. */
  max_slots: number;
  /** `config` or `discovered` (see the pool's). */
  max_slots_source: string;
  name: string;
  /** The account's own quotas in this pool (`[[handlers.NAME.accounts]]` `rate`, `daily`). */
  quotas: QuotaView[];
  /**
   * The account's spend limit, over every pool it serves (`[[handlers.NAME.accounts]]`
   * `spend`).
   */
  spend?: null | SpendView;
  /** `active`, or `drained`: no new submits (its in-flight units finish). */
  state: string;
  /** Slots its units hold now; `None` when the slot store could not be asked. */
  used?: number | null;
}

/** One stored attempt (`GET /v1/tasks/{id}/webhooks`). */
export interface Attempt {
  at: number;
  duration_ms: number;
  error?: string | null;
  status?: number | null;
}

/** A tenant's budget. */
export interface Budget {
  /** The most its units may cost per period, in the provider's unit. */
  limit: number;
  /** The period in milliseconds. */
  period_ms: number;
  /** Who set it last: `config` or `api`. */
  source: string;
  tenant: string;
  updated_at: number;
}

/** The body of `PUT /v1/tenants/{name}/budget`. */
export interface BudgetBody {
  /** The most the tenant's units may cost per period, in the provider's cost unit. */
  limit: number;
  /**
   * The period, like `"1h"` or `"1d"` (1 second to 366 days); periods are aligned to the
   * Unix epoch.
   */
  period: string;
}

/** A slot set closed by the provider's answer. */
export interface Closure {
  /**
   * Where `until` comes from: `provider` (the answer said when), `window` (the pool's
   * fullest window frees a create then), `probe` (a rest before asking again).
   */
  basis: string;
  /** What closed it: `quota_exhausted` (the provider refused a create for a quota). */
  code: string;
  /** The provider's words, as the handler reported them. */
  reason: string;
  /** When it closed (Unix ms). */
  since: number;
  /** Until when (Unix ms): then one unit is submitted as the probe. */
  until: number;
}

/**
 * The request body of `POST /v1/tasks/{type}`, as documented. The body is checked by
 * [`parse_request`] (field by field, naming the culprit); a test keeps the two in step.
 */
export interface CreateBody {
  /** Where the task's completion webhook goes (a public `http`/`https` URL). */
  callback_url?: string | null;
  /**
   * Complete by this time (RFC 3339). A unit whose projected completion (projected start
   * plus the provider's p95 duration) is later fails with `deadline_unreachable` before any
   * provider request, unless `deadline_policy` is `best_effort`. Earlier deadlines fill
   * first within a priority.
   */
  deadline?: string | null;
  /**
   * `refuse` (default): fail units that cannot meet their terms before submitting them;
   * `best_effort`: run them anyway and record the decision in their events.
   */
  deadline_policy?: null | DeadlinePolicy;
  /** A repeat with the same key (per tenant) answers the task it already created. */
  idempotency_key?: string | null;
  /**
   * What to do, in the task type's own terms; the handler's `plan` splits it into units
   * (and refuses it with 422 when it is not valid).
   */
  payload: Record<string, unknown>;
  /** Higher runs first within the tenant's fair share (default 0). */
  priority?: number | null;
  /** Be submitted by this time (RFC 3339), under the same policy. */
  start_by?: string | null;
}

/** What happens to a unit that cannot meet its deadline or start-by time. */
export type DeadlinePolicy = "refuse" | "best_effort";

/** A delivery as stored. */
export interface Delivery {
  /** Attempts made so far. */
  attempts_made: number;
  created_at: number;
  delivered_at?: number | null;
  event: string;
  id: string;
  last_error?: string | null;
  last_status?: number | null;
  next_at: number;
  /** `pending`, `delivered` or `failed` (given up). */
  status: string;
  task_id: string;
  url: string;
}

/** A completion webhook delivery, without its attempts. */
export interface DeliverySummary {
  /** Attempts made so far. */
  attempts: number;
  created_at: number;
  delivered_at?: number | null;
  event: string;
  id: string;
  last_error?: string | null;
  last_status?: number | null;
  next_at: number;
  /** `pending`, `delivered` or `failed` (given up). */
  status: string;
  task_id: string;
  tenant: string;
  url: string;
}

/** One webhook delivery with its attempts. */
export interface DeliveryView extends Delivery {
  /** Every attempt so far, oldest first. */
  attempts: Attempt[];
}

/** Why an account is drained, since when, and when it is probed next. */
export interface Drain {
  /** `account_refused` or `account_exhausted`. */
  code: string;
  /** When one unit is next submitted to it as a probe (Unix ms). */
  next_probe_at: number;
  /** The provider's words, as the handler reported them. */
  reason: string;
  /** When it was drained (Unix ms). */
  since: number;
}

/** The estimate as `GET /v1/pools` shows it. */
export interface EstimateView {
  /** The learned ceiling; `None`: the configured limit holds. */
  ceiling?: number | null;
  /** While waiting out a refusal: no create above `level` before `until` (Unix ms). */
  hold?: null | Hold;
  /** The last decision and when it was made (Unix ms). */
  last?: null | Verdict;
  last_at?: number | null;
  /** When one create above the ceiling is let through next (Unix ms). */
  next_probe_at?: number | null;
  refusals_ceiling: number;
  /** Refusals read as noise (each cost one request) and refusals that set or kept a ceiling. */
  refusals_noise: number;
}

/** `GET /v1/events` without a stream: one page of the log. */
export interface EventsPage {
  /** In log order. */
  events: UnitEvent[];
  /** Pass as `after` to read on. */
  next: string;
}

/**
 * The optional parts of the contract a handler uses (contract 1.1 `extensions.features`, and
 * whether it exports the 1.2 `costs`; none for a 1.0 component).
 */
export interface Features {
  /** Provider-side cancel of cancelled tasks' jobs. */
  cancel: boolean;
  /**
   * The component exports `costs` (contract 1.2): planned units carry cost estimates
   * (each may still be unknown).
   */
  costs: boolean;
  /**
   * The component exports `provider` (contract 1.3): planned units carry expected
   * durations, and the provider's published limits are read.
   */
  provider: boolean;
  /** The component exports `routes` (contract 1.5): route targets may name its models. */
  routes: boolean;
  /** Units choose their pool in `plan-routed`. */
  routing: boolean;
}

/** `GET /v1/handlers`: the active handlers, or with `?all=true` every version seen. */
export type HandlerList = HandlerView[] | VersionRecord[];

/**
 * One process's word on one release (`RecordWrite::handler_load_put`): `GET /v1/handlers`
 * shows, per process, what it runs and what it could not load.
 */
export interface HandlerLoad {
  /**
   * Unix ms of the process's last word on it: it rewrites its rows at every look at the
   * releases, so an old `at` means the process has gone.
   */
  at: number;
  name: string;
  /** The process: host, pid and a random suffix (new at each start). */
  process: string;
  reason?: string | null;
  /** `api`, `scheduler` or `all`. */
  role: string;
  sha256: string;
  /**
   * `loaded` (serving), `draining` (replaced, kept for the provider jobs it created),
   * `unloaded` or `failed` (see `reason`).
   */
  state: string;
  version: string;
}

/**
 * One row of the append-only handler version history: a state a handler file's version
 * entered (loaded and active, refused, quarantined, unloaded).
 */
export interface HandlerVersionRow {
  /** When (Unix ms). */
  at: number;
  /** Row id (ascending with time); ignored when recording. */
  id: number;
  /** Declared handler name, when `describe` answered. */
  name?: string | null;
  /** The file the version came from. */
  path: string;
  /** Why it was refused, quarantined or unloaded. */
  reason?: string | null;
  /** sha256 of the file's content, hex. */
  sha256: string;
  /** `active`, `refused`, `quarantined` or `unloaded`. */
  state: string;
  /** Declared version, when `describe` answered. */
  version?: string | null;
}

/** One loaded handler as shown. */
export interface HandlerView {
  /** Crashing calls in a row so far (quarantine at `[limits] quarantine_after`). */
  consecutive_faults: number;
  /** The `slotd:handler` contract version the component was built against ("1.0.0" … "1.5.0"). */
  contract: string;
  /** The optional parts of the contract it uses (`cancel`, `routing`: 1.1 and later; `costs`: 1.2). */
  features: Features;
  /** When this version was loaded (Unix ms). */
  loaded_at: number;
  name: string;
  path: string;
  pools: PoolInfo[];
  /** sha256 of the component file, hex. */
  sha256: string;
  /** Always `active` in this list (the field matches `?all=true`). */
  state: VersionState;
  task_types: TaskTypeInfo[];
  version: string;
}

export interface Hold {
  level: number;
  until: number;
}

/** One unit's hold of a slot; another tenant's (for a non-admin) without unit, task or tenant. */
export interface IntervalView {
  /** It began before the window. */
  clipped: boolean;
  /** Absent while the slot is still held. */
  end_ms?: number | null;
  outcome?: null | Outcome;
  slot: number;
  start_ms: number;
  task_id?: string | null;
  tenant?: string | null;
  unit_id?: string | null;
}

/** Provider job durations over the window (jobs that ended in it). */
export interface Latency {
  p50_ms?: number | null;
  p95_ms?: number | null;
}

/** Who holds a pool's lease, as any process sees it in Redis (the API shows it). */
export interface LeaseView {
  /** The holding scheduler's owner id (`slotd_scheduler_info` on its metrics), if any. */
  holder?: string | null;
  /** Milliseconds the pool has spent without a holder between tenures, all told. */
  unheld_ms_total: number;
}

/** Who the caller is. */
export interface Me {
  /** An admin key (or loopback without keys): sees and acts on every tenant's tasks. */
  admin: boolean;
  tenant: string;
}

/** One minute of the window. */
export interface MinuteStats {
  /** Jobs that ended in this minute. */
  ended: number;
  /** Of those, the provider's over-capacity answers (1303). */
  over_capacity: number;
  /** Median duration at the provider of the jobs that ended in this minute (whole ones). */
  p50_ms?: number | null;
  p95_ms?: number | null;
  /**
   * Units that went back to pending without a job (retryable submit errors and
   * over-capacity answers).
   */
  returned: number;
  start_ms: number;
}

/** How an interval closed. */
export type Outcome = "ended" | "returned" | "over_capacity";

/** A pool a handler proposes. */
export interface PoolInfo {
  default_max_slots: number;
  name: string;
}

/** One pool as shown. */
export interface PoolView {
  /**
   * The provider accounts the pool draws on (`[[handlers.NAME.accounts]]`); for a handler
   * with one implicit account, empty, or while that account is drained, one entry named
   * `default`. The pool's figures are their sums.
   */
  accounts: AccountView[];
  /**
   * What the provider's capacity refusals taught about the pool's own slot set (the
   * implicit account; named accounts show theirs): the learned ceiling, a refusal's
   * back-off in force, the next probe, the last decision and the refusals read as noise or
   * as a ceiling. `None` while nothing was refused.
   */
  capacity?: null | EstimateView;
  /**
   * While quotas hold every new submit back (a full window, or the provider's refusal
   * closed every slot set of the pool): until when (Unix ms); pending units wait until then.
   */
  closed_until?: number | null;
  /**
   * The provider's refusal that closed the pool's own slot set (the implicit account), with
   * its words; named accounts show theirs in `accounts`.
   */
  closure?: null | Closure;
  /**
   * The limit the scheduler fills to now: `max_slots`, or lower while the provider has shown
   * less room than configured (adaptive capacity after over-capacity answers).
   */
  effective_max_slots?: number | null;
  handlers: string[];
  /**
   * In a cluster (Redis configured): which scheduler drives the pool and how long it has
   * gone without one between holders; `None` embedded, or when Redis could not be asked.
   */
  lease?: null | LeaseView;
  /**
   * The effective maximum; `None` for a pool that only stored units still name (its handler
   * is not loaded and no operator setting mentions it).
   */
  max_slots?: number | null;
  /**
   * Where `max_slots` comes from: `config` (the operator's `[pools]`, or the handler's
   * proposal) or `discovered` (the provider published a lower limit, contract 1.3);
   * `None` with `max_slots`.
   */
  max_slots_source?: string | null;
  name: string;
  /**
   * Its quotas on creates (`[pools."NAME"] rate`, `daily`): each dimension's limit, use,
   * room and when it resets. Empty for a pool with slots only.
   */
  quotas: QuotaView[];
  /**
   * The provider accounts whose limit the pool shares with other pools
   * (`[provider_accounts.NAME]`): the account's slots in use over all its pools, this
   * pool's share and what it holds of it, borrowed included.
   */
  shared_accounts: ShareView[];
  /**
   * Its spend limit (`[pools."NAME"] spend`): the period's limit, reserved-or-spent cost,
   * what is left and when the period ends. A spent pool is `closed_until` then too.
   */
  spend?: null | SpendView;
  task_types: string[];
  /** Unit counts by status (every status present, zeros included). */
  units: Record<string, number>;
  /**
   * Slots held now; `None` when the slot store could not be asked (it is reported, not
   * fatal: the database still answers everything else).
   */
  used?: number | null;
}

/** A probe's answer. */
export interface Probe {
  /** `ok` (`/healthz`) or `ready` (`/readyz`). */
  status: string;
}

/** The problem+json body (RFC 9457) of every error. */
export interface Problem {
  /** What went wrong with this request. */
  detail: string;
  /** The request field, query parameter or header at fault, for validation problems. */
  field?: string | null;
  /** The HTTP status, repeated. */
  status: number;
  /** Short human summary of the kind. */
  title: string;
  /** A stable URN naming the kind of problem (`urn:slotd:problem:not-found`, …). */
  type: string;
}

/** What publishing did. */
export interface PublishedView {
  /**
   * `new`: stored now; `already`: this very file was published before (made current
   * again).
   */
  published: string;
  release: Release;
  /** The rollout started with it (`?rollout=`). */
  rollout?: null | Rollout;
}

/** One dimension as `GET /v1/pools` shows it. */
export interface QuotaView {
  /** `rate` or `daily`. */
  dimension: string;
  /** Creates allowed in the window. */
  limit: number;
  remaining: number;
  /**
   * When the window next has room for one more create (Unix ms), while it is full; when
   * the oldest counted create leaves it otherwise (absent when it counts none).
   */
  resets_at?: number | null;
  /**
   * `config`: from `[pools."NAME"]` (or the account's section); `discovered`: published by
   * the provider (contract 1.3), lower than any configured one. A discovered quota's limit
   * and use are the provider's, its use counting other clients' creates too.
   */
  source: string;
  /** Creates counted in the window now. */
  used: number;
  /** The window, e.g. `rolling 1m` or `calendar day (UTC+08:00)`. */
  window: string;
}

/** What a webhook did (for the provider's logs and for tests). */
export interface Received {
  /** Unit changes applied. */
  applied: number;
  /** Changes for units already past them (a repeat), ignored. */
  ignored: number;
  /** Changes the state machine or the token's scope refused. */
  refused: number;
}

/** A release as listed: everything but its bytes. */
export interface Release {
  contract: string;
  name: string;
  /**
   * When it last became its handler's current release (Unix ms): at publishing, or when
   * the plugins directory saw its file change (see [`current_releases`]).
   */
  promoted_at: number;
  /** Unix ms. */
  published_at: number;
  published_by: string;
  /** Hex sha256 of the bytes: the release's key. */
  sha256: string;
  /** The file's size in bytes. */
  size: number;
  /**
   * Published as able to take over the jobs of the releases before it: they move to it
   * at once instead of finishing on the release that created them.
   */
  takes_over: boolean;
  version: string;
  /**
   * When it was withdrawn (its file removed from the plugins directory), if it was: a
   * withdrawn release is no handler's current one until promoted again.
   */
  withdrawn_at?: number | null;
  withdrawn_reason?: string | null;
}

/** A process following the releases, and when it last looked. */
export interface ReleaseFollower {
  /** Unix ms of its last look at the releases. */
  last_seen: number;
  process: string;
  /** `api`, `scheduler` or `all`. */
  role: string;
}

/** `GET /v1/handlers/releases`. */
export interface ReleaseList {
  /** The processes following the releases. */
  processes: ReleaseFollower[];
  /** Newest published first. */
  releases: ReleaseView[];
  /**
   * The newest rollouts (at most 20), newest first: stage, state, why it moved, and the
   * last judgement's figures beside the incumbent's.
   */
  rollouts: Rollout[];
}

/** One release as listed, with every process's word on it. */
export interface ReleaseView extends Release {
  /** Whether it is its handler's current release (what processes load). */
  current: boolean;
  /** Each process's word on it, heard within the last minute. */
  processes: HandlerLoad[];
}

/** What `POST /v1/tasks/{id}/retry` did. */
export interface Retried {
  /** Units moved back to `pending` (failed) or made due for finalization again. */
  retried: number;
  task_id: string;
}

/** A rollout as stored. */
export interface Rollout {
  /** The release rolled out (sha256). */
  candidate: string;
  /** Its steps, oldest first (filled in by listings that show them). */
  events?: RolloutEvent[];
  /** The last judgement's figures (JSON), if any. */
  figures?: Record<string, unknown> | null;
  id: string;
  /** The release serving when it started (sha256). */
  incumbent: string;
  /** How much higher the candidate's failure share may be than the incumbent's (0..1). */
  margin: number;
  /** Candidate units ended before a stage is judged. */
  min_units: number;
  /** The handler. */
  name: string;
  /** Why it last moved. */
  reason?: string | null;
  /** Index of the stage in force. */
  stage: number;
  stage_started_at: number;
  /** Shares of new units per stage, in percent (the last is 100). */
  stages: number[];
  started_at: number;
  state: RolloutState;
  updated_at: number;
}

/** What a person does to a rollout. */
export type RolloutAction = "promote" | "rollback" | "pause" | "resume";

/** One step of a rollout. */
export interface RolloutEvent {
  /** Unix ms. */
  at: number;
  reason: string;
  /** Index of the stage it was at. */
  stage: number;
  state: RolloutState;
}

/** Body of `POST /v1/handlers/{name}/rollout`. */
export interface RolloutRequest {
  action: RolloutAction;
}

/** Where a rollout is. */
export type RolloutState = "running" | "paused" | "promoted" | "rolled_back";

/** One route as shown. */
export interface RouteView {
  name: string;
  /** Units waiting on the route for a target with room. */
  pending: number;
  /** `ordered`, `cheapest`, `fastest` or `weights`. */
  policy: string;
  targets: TargetView[];
}

/** A pool's share of a provider account that spans pools. */
export interface ShareView {
  /** The provider account (`[provider_accounts.NAME]`). */
  account: string;
  /**
   * Of those, above its `min`: borrowed from the other pools' idle share, given back as
   * they free.
   */
  borrowed: number;
  /** Which of the pool's handler accounts is on it (`None`: the handler's implicit one). */
  handler_account?: string | null;
  /** Slots this pool holds on the account now. */
  held: number;
  /** The most this pool may hold. */
  max: number;
  /** The account's limit over every pool on it. */
  max_slots: number;
  /** Kept for this pool while it has work waiting. */
  min: number;
  /** What the account would let the pool take now. */
  room: number;
  /** Slots held over every pool on it now. */
  used: number;
  /**
   * The pool has work waiting for a slot on the account (the other pools keep its unmet
   * `min` free).
   */
  waiting: boolean;
}

/** A spend limit as `GET /v1/pools` shows it. */
export interface SpendView {
  /** The most the period's creates may cost, in the provider's cost unit. */
  limit: number;
  /** The period, e.g. `30days`; periods are aligned to the Unix epoch. */
  period: string;
  remaining: number;
  /** When the current period ends (Unix ms): its spend starts afresh then. */
  resets_at: number;
  /**
   * Reserved (running submissions' estimates) and spent (settled, at the provider's
   * reported cost where known) in the current period.
   */
  used: number;
}

/** A stage of a task type and the pool its jobs occupy. */
export interface StageInfo {
  /** Other pools `plan` may route this stage's units to (contract 1.1 `routing`). */
  alt_pools?: string[];
  name: string;
  /** The stage's default pool. */
  pool: string;
}

/** A target's pool and its room. */
export interface TargetPool {
  effective_max_slots: number;
  name: string;
  /** Slots held now; `None` when the slot store could not be asked. */
  used?: number | null;
}

/** One target of a route. */
export interface TargetView {
  /** Free slots over its pools now. */
  free: number;
  handler: string;
  /**
   * The newest of them: what the provider said (admins only: it may quote another
   * tenant's request).
   */
  last_refusal?: string | null;
  model: string;
  /** The pools its handler draws on, with their room now. */
  pools: TargetPool[];
  /** Its refusals among the newest events, by reason. */
  recent_refusals: Record<string, number>;
  /**
   * `ready`; or why it takes nothing: `handler not loaded`, `handler serves no routes`
   * (contract before 1.5), `model not served`.
   */
  state: string;
  weight?: number | null;
}

/** `GET /v1/tasks/{id}/events` as JSON. */
export interface TaskEvents {
  /** Oldest first. */
  events: UnitEvent[];
  task_id: string;
}

/** `GET /v1/tasks`: a page of the tenant's tasks. */
export interface TaskList {
  /** Pass as `cursor` for the next page; absent on the last page. */
  next_cursor?: string | null;
  /** Newest first. */
  tasks: TaskSummary[];
}

/** A task's status, derived from its units' statuses. */
export type TaskStatus = "pending" | "running" | "completed" | "failed" | "cancelled";

/** A task without its per-unit detail: what `GET /v1/tasks` lists. */
export interface TaskSummary {
  /**
   * The client asked to cancel the task. Its status stays `running` while units wait for
   * their provider jobs to end (they keep their slots), then becomes `cancelled`.
   */
  cancel_requested: boolean;
  /** Units completed. */
  completed: number;
  /** Unix milliseconds. */
  created_at: number;
  /** Complete by this time (Unix ms), if the task asked. */
  deadline_at?: number | null;
  /** `refuse` or `best_effort`, when the task has a deadline or start-by time. */
  deadline_policy?: string | null;
  idempotency_key?: string | null;
  /**
   * Human progress line ("3/12 completed, 2 running, 7 waiting"); after a cancel, it
   * starts with how many units wait for their provider jobs to end.
   */
  message: string;
  priority: number;
  /** Be submitted by this time (Unix ms), if the task asked. */
  start_by?: number | null;
  status: TaskStatus;
  task_id: string;
  /** The tenant that owns the task (an admin's lists mix tenants). */
  tenant: string;
  /** Units in the task. */
  total: number;
  type: string;
  /** Unix milliseconds. */
  updated_at: number;
}

/** A task type a handler serves. */
export interface TaskTypeInfo {
  name: string;
  stages: StageInfo[];
}

/** `GET /v1/tasks/{id}` and the answer to a cancel. */
export interface TaskView extends TaskSummary {
  /** Sum of the provider-reported costs, when any unit reported one. */
  cost?: number | null;
  /** Sum of the handler's cost estimates, when it gave any (contract 1.2). */
  cost_estimate?: number | null;
  /**
   * For a failed task: the error (`{code?, message}`) of the first unit that failed or
   * whose finalization gave up (code `finalize`; retrying the task finalizes it again).
   */
  error?: TaskError | null;
  /**
   * When the task's jobs in its pool are expected to end (Unix ms), from the pool's free
   * slots, the fill order and the provider's observed durations (see `eta.rs`); absent for
   * a finished task, and until the pool has seen enough jobs end to say.
   */
  estimated_completion_at?: number | null;
  /**
   * Units of its pool filled before the task's next waiting unit (0: it is next); absent
   * when none of its units waits for a slot.
   */
  queue_position?: number | null;
  /** One entry per unit, by index. */
  results: TaskResult[];
  /** The full unit records, when asked for with `?units=true`. */
  units?: Unit[] | null;
}

/** `GET /v1/tasks/{id}/webhooks`. */
export interface TaskWebhooks {
  /** Where the task's completion is delivered, if anywhere. */
  callback_url?: string | null;
  /** Oldest first. */
  deliveries: DeliveryView[];
  task_id: string;
}

/** A pool's slot timeline. */
export interface TimelineView {
  intervals: IntervalView[];
  /** Lanes used by `intervals` (a lane's intervals never overlap). */
  lanes: number;
  latency: Latency;
  /** The pool's configured limit; absent for a pool only stored units name. */
  max_slots?: number | null;
  minutes: number;
  now_ms: number;
  /** Throughput and provider latency, minute by minute. */
  per_minute: MinuteStats[];
  pool: string;
  /** The window: from `since_ms` to `now_ms` (Unix ms). */
  since_ms: number;
  /** The window held more slot changes than one answer reads; the oldest were left out. */
  truncated: boolean;
}

/** One unit as stored. Times are Unix milliseconds (the scheduler's injected clock). */
export interface Unit extends UnitTerms, UnitReleases {
  /** Transient errors and handler faults spent from the retry budget in this stage. */
  attempts: number;
  /**
   * When the client cancelled the unit while it was `submitted` (its job at the provider):
   * it keeps its slot and is polled until the job ends, then becomes `cancelled`; it is
   * never finalized and never submitted again.
   */
  cancel_requested_at?: number | null;
  cost?: string | null;
  created_at: number;
  /** Error JSON (`{"code":…, "message":…}`) of the last failure or transient error. */
  error?: string | null;
  id: string;
  /** Position within the task, from 0. */
  index: number;
  /** When the unit may next be polled (submitted) or submitted (pending). */
  next_at: number;
  /** Polls in the current stage (drives the backoff). */
  polls: number;
  /** The pool the current stage occupies. */
  pool: string;
  /** Task priority, copied so that fill order is one indexed query. */
  priority: number;
  provider_job_id?: string | null;
  /** Result JSON, once succeeded (and, after finalization, with the stored artifacts). */
  result?: string | null;
  /**
   * Pools chosen by the handler's `plan-routed` (contract 1.1), as a JSON object
   * `{"stage": "pool"}`; stages not named use their default pool.
   */
  routes?: string | null;
  /**
   * A routed unit's options and binding (docs/routes.md), as JSON [`super::UnitRouting`];
   * `None` for a unit of a handler's own task type.
   */
  routing?: string | null;
  /** Handler-defined description of the work (JSON from `plan`). */
  spec: string;
  stage: string;
  /** Handler-private state (JSON). */
  state: string;
  status: UnitStatus;
  /**
   * Submit attempt of the current stage; part of the idempotency key. Incremented only by a
   * deliberate resubmission (explicit retry of a failed unit), since the provider keeps
   * failed jobs' client ids.
   */
  submit_attempt: number;
  submitted_at?: number | null;
  task_id: string;
  task_type: string;
  tenant: string;
  updated_at: number;
}

/** One row of the append-only unit event log. */
export interface UnitEvent {
  at: number;
  /** What happened ("accepted job 123", "capacity rejected", "handler fault: trap", …). */
  detail?: string | null;
  error?: string | null;
  from_status?: string | null;
  id: number;
  stage: string;
  task_id: string;
  to_status: string;
  unit_id: string;
}

/**
 * The handler releases behind a unit (docs/handlers.md, "Releases"), by sha256: the one whose
 * `plan` made it and the one whose `tick` last submitted it (and created its current provider
 * job, if it has one). The job's polls, provider callbacks, cancel and finalization go through
 * the latter while it stays loaded; a rollout is judged on what each release's submissions
 * came to.
 */
export interface UnitReleases {
  job_release?: string | null;
  planned_release?: string | null;
}

/** Where a unit is in its life. A slot is held exactly while a unit is `Submitted`. */
export type UnitStatus = "pending" | "submitted" | "succeeded" | "finalizing" | "completed" | "failed" | "cancelled";

/**
 * What a unit carries beyond its status: the provider account it was marked submitted on, its task's
 * deadline terms (copied so the fill order stays one indexed query), the handler's estimate of
 * its cost, and why it is waiting when it is due but not filled.
 */
export interface UnitTerms {
  /**
   * The account of the unit's latest submit marker (`None`: the handler's implicit
   * account, or never submitted).
   */
  account?: string | null;
  /** `deadline_policy: best_effort`: an unreachable deadline is recorded, not enforced. */
  best_effort: boolean;
  /** The handler's estimate of the unit's cost, in the provider's unit (contract 1.2). */
  cost_estimate?: number | null;
  /** Complete by this time (Unix ms), if the task asked for it. */
  deadline_at?: number | null;
  /** Be submitted by this time (Unix ms), if the task asked for it. */
  start_by?: number | null;
  /** Why a due `pending` unit is not being filled (`budget`), if it is held back. */
  wait_reason?: string | null;
}

/** A tenant's spending in the current period. */
export interface Usage {
  /** End of the period (Unix ms): reservations start afresh then. */
  period_end: number;
  /** Start of the period (Unix ms), aligned to the epoch. */
  period_start: number;
  /** Estimates reserved by submissions still running. */
  reserved: number;
  /** Settled cost of the submissions that ended (provider-reported where known). */
  spent: number;
  /** Submissions counted (ended and running). */
  submissions: number;
}

/** A tenant's budget and what it has used in the current period. */
export interface UsageView {
  /**
   * The budget in force; absent when the tenant has none (its use is then not reserved,
   * only the provider's costs are summed).
   */
  budget?: null | Budget;
  /** The current period's figures; absent without a budget. */
  period?: null | Usage;
  /** What is left this period: limit − spent − reserved (never below 0). */
  remaining?: number | null;
  tenant: string;
  /**
   * Over every unit the tenant ever ran: the provider-reported cost, and the handlers'
   * estimates.
   */
  total_cost: number;
  total_estimated: number;
}

/** What the estimate made of a tick's answers. */
export type Verdict = "noise" | "ceiling" | "probe_refused" | "probe_accepted" | "queued" | "restored";

/** One version of one handler file, as the API shows it. */
export interface VersionRecord {
  /** When it last changed state (Unix ms). */
  changed_at: number;
  /** Declared handler name; `None` when refused before `describe` answered. */
  name?: string | null;
  /** The file it came from. */
  path: string;
  /** Why it was refused, quarantined or unloaded. */
  reason?: string | null;
  /** When this version was first seen (Unix ms). */
  seen_at: number;
  /** sha256 of the file's content, hex. */
  sha256: string;
  state: VersionState;
  /** Declared version; `None` when refused before `describe` answered. */
  version?: string | null;
}

/** Where a version of a handler file stands. */
export type VersionState = "active" | "refused" | "quarantined" | "unloaded";

/** `GET /v1/webhooks`. */
export interface WebhookList {
  /** Newest first. */
  deliveries: DeliverySummary[];
}
