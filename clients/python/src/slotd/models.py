"""Typed models of slotd's API, generated from ``openapi.json`` (OpenAPI 3.1).

Do not edit by hand: run ``python3 clients/python/tools/generate_models.py`` after the API
document changes (``tests/test_models.py`` fails until you do). Every response body is a plain
``dict`` at run time; these ``TypedDict`` classes describe its keys for type checkers and
readers. Times are Unix milliseconds unless a field says otherwise.
"""

# ruff: noqa: E501
from typing import Any, Literal, NotRequired, TypedDict, Union

__all__ = [
    'Accepted',
    'AccountView',
    'Attempt',
    'Budget',
    'BudgetBody',
    'Closure',
    'CreateBody',
    'DeadlinePolicy',
    'Delivery',
    'DeliverySummary',
    'DeliveryView',
    'Drain',
    'EstimateView',
    'EventsPage',
    'Features',
    'HandlerList',
    'HandlerLoad',
    'HandlerVersionRow',
    'HandlerView',
    'Hold',
    'IntervalView',
    'Latency',
    'LeaseView',
    'Me',
    'MinuteStats',
    'Outcome',
    'PoolInfo',
    'PoolView',
    'Probe',
    'Problem',
    'PublishedView',
    'QuotaView',
    'Received',
    'Release',
    'ReleaseFollower',
    'ReleaseList',
    'ReleaseView',
    'Retried',
    'Rollout',
    'RolloutAction',
    'RolloutEvent',
    'RolloutRequest',
    'RolloutState',
    'RouteView',
    'ShareView',
    'SpendView',
    'StageInfo',
    'TargetPool',
    'TargetView',
    'TaskEvents',
    'TaskList',
    'TaskStatus',
    'TaskSummary',
    'TaskTypeInfo',
    'TaskView',
    'TaskWebhooks',
    'TimelineView',
    'Unit',
    'UnitEvent',
    'UnitReleases',
    'UnitStatus',
    'UnitTerms',
    'Usage',
    'UsageView',
    'Verdict',
    'VersionRecord',
    'VersionState',
    'WebhookList',
]

# The API version these models were generated from (``info.version`` of the document).
API_VERSION = '0.1.0'


#: What happens to a unit that cannot meet its deadline or start-by time.
DeadlinePolicy = Literal['refuse', 'best_effort']

#: How an interval closed.
Outcome = Literal['ended', 'returned', 'over_capacity']

#: What a person does to a rollout.
RolloutAction = Literal['promote', 'rollback', 'pause', 'resume']

#: Where a rollout is.
RolloutState = Literal['running', 'paused', 'promoted', 'rolled_back']

#: A task's status, derived from its units' statuses.
TaskStatus = Literal['pending', 'running', 'completed', 'failed', 'cancelled']

#: Where a unit is in its life. A slot is held exactly while a unit is `Submitted`.
UnitStatus = Literal['pending', 'submitted', 'succeeded', 'finalizing', 'completed', 'failed', 'cancelled']

#: What the estimate made of a tick's answers.
Verdict = Literal['noise', 'ceiling', 'probe_refused', 'probe_accepted', 'queued', 'restored']

#: Where a version of a handler file stands.
VersionState = Literal['active', 'refused', 'quarantined', 'unloaded']


class Accepted(TypedDict):
    """What a create answers."""
    #: `pending` for a new task; for a repeated idempotency key, where that task is now.
    status: "TaskStatus"
    task_id: str


class AccountView(TypedDict):
    """One provider account's share of a pool."""
    #: What its capacity refusals taught (see the pool's `capacity`).
    capacity: NotRequired["EstimateView | None"]
    #: The provider's quota refusal that closed its slot set, and until when.
    closure: NotRequired["Closure | None"]
    #: Why it is drained and when it is probed next.
    drained: NotRequired["Drain | None"]
    #: The limit filled to now (adaptive capacity, per account).
    effective_max_slots: int
    #: Its limit in this pool: the configured one, or the provider's when it published less.
    max_slots: int
    #: `config` or `discovered` (see the pool's).
    max_slots_source: str
    name: str
    #: The account's own quotas in this pool (`[[handlers.NAME.accounts]]` `rate`, `daily`).
    quotas: "list[QuotaView]"
    #: The account's spend limit, over every pool it serves (`[[handlers.NAME.accounts]]`
    #: `spend`).
    spend: NotRequired["SpendView | None"]
    #: `active`, or `drained`: no new submits (its in-flight units finish).
    state: str
    #: Slots its units hold now; `None` when the slot store could not be asked.
    used: NotRequired[int | None]


class Attempt(TypedDict):
    """One stored attempt (`GET /v1/tasks/{id}/webhooks`)."""
    at: int
    duration_ms: int
    error: NotRequired[str | None]
    status: NotRequired[int | None]


class Budget(TypedDict):
    """A tenant's budget."""
    #: The most its units may cost per period, in the provider's unit.
    limit: float
    #: The period in milliseconds.
    period_ms: int
    #: Who set it last: `config` or `api`.
    source: str
    tenant: str
    updated_at: int


class BudgetBody(TypedDict):
    """The body of `PUT /v1/tenants/{name}/budget`."""
    #: The most the tenant's units may cost per period, in the provider's cost unit.
    limit: float
    #: The period, like `"1h"` or `"1d"` (1 second to 366 days); periods are aligned to the
    #: Unix epoch.
    period: str


class Closure(TypedDict):
    """A slot set closed by the provider's answer."""
    #: Where `until` comes from: `provider` (the answer said when), `window` (the pool's
    #: fullest window frees a create then), `probe` (a rest before asking again).
    basis: str
    #: What closed it: `quota_exhausted` (the provider refused a create for a quota).
    code: str
    #: The provider's words, as the handler reported them.
    reason: str
    #: When it closed (Unix ms).
    since: int
    #: Until when (Unix ms): then one unit is submitted as the probe.
    until: int


class CreateBody(TypedDict):
    """
    The request body of `POST /v1/tasks/{type}`, as documented. The body is checked by
    [`parse_request`] (field by field, naming the culprit); a test keeps the two in step.
    """
    #: Where the task's completion webhook goes (a public `http`/`https` URL).
    callback_url: NotRequired[str | None]
    #: Complete by this time (RFC 3339). A unit whose projected completion (projected start
    #: plus the provider's p95 duration) is later fails with `deadline_unreachable` before any
    #: provider request, unless `deadline_policy` is `best_effort`. Earlier deadlines fill
    #: first within a priority.
    deadline: NotRequired[str | None]
    #: `refuse` (default): fail units that cannot meet their terms before submitting them;
    #: `best_effort`: run them anyway and record the decision in their events.
    deadline_policy: NotRequired["DeadlinePolicy | None"]
    #: A repeat with the same key (per tenant) answers the task it already created.
    idempotency_key: NotRequired[str | None]
    #: What to do, in the task type's own terms; the handler's `plan` splits it into units
    #: (and refuses it with 422 when it is not valid).
    payload: dict[str, Any]
    #: Higher runs first within the tenant's fair share (default 0).
    priority: NotRequired[int | None]
    #: Be submitted by this time (RFC 3339), under the same policy.
    start_by: NotRequired[str | None]


class Delivery(TypedDict):
    """A delivery as stored."""
    #: Attempts made so far.
    attempts_made: int
    created_at: int
    delivered_at: NotRequired[int | None]
    event: str
    id: str
    last_error: NotRequired[str | None]
    last_status: NotRequired[int | None]
    next_at: int
    #: `pending`, `delivered` or `failed` (given up).
    status: str
    task_id: str
    url: str


class DeliverySummary(TypedDict):
    """A completion webhook delivery, without its attempts."""
    #: Attempts made so far.
    attempts: int
    created_at: int
    delivered_at: NotRequired[int | None]
    event: str
    id: str
    last_error: NotRequired[str | None]
    last_status: NotRequired[int | None]
    next_at: int
    #: `pending`, `delivered` or `failed` (given up).
    status: str
    task_id: str
    tenant: str
    url: str


class DeliveryView(Delivery):
    """One webhook delivery with its attempts."""
    #: Every attempt so far, oldest first.
    attempts: "list[Attempt]"


class Drain(TypedDict):
    """Why an account is drained, since when, and when it is probed next."""
    #: `account_refused` or `account_exhausted`.
    code: str
    #: When one unit is next submitted to it as a probe (Unix ms).
    next_probe_at: int
    #: The provider's words, as the handler reported them.
    reason: str
    #: When it was drained (Unix ms).
    since: int


class EstimateView(TypedDict):
    """The estimate as `GET /v1/pools` shows it."""
    #: The learned ceiling; `None`: the configured limit holds.
    ceiling: NotRequired[int | None]
    #: While waiting out a refusal: no create above `level` before `until` (Unix ms).
    hold: NotRequired["Hold | None"]
    #: The last decision and when it was made (Unix ms).
    last: NotRequired["Verdict | None"]
    last_at: NotRequired[int | None]
    #: When one create above the ceiling is let through next (Unix ms).
    next_probe_at: NotRequired[int | None]
    refusals_ceiling: int
    #: Refusals read as noise (each cost one request) and refusals that set or kept a ceiling.
    refusals_noise: int


class EventsPage(TypedDict):
    """`GET /v1/events` without a stream: one page of the log."""
    #: In log order.
    events: "list[UnitEvent]"
    #: Pass as `after` to read on.
    next: str


class Features(TypedDict):
    """
    The optional parts of the contract a handler uses (contract 1.1 `extensions.features`,
    and
    whether it exports the 1.2 `costs`; none for a 1.0 component).
    """
    #: Provider-side cancel of cancelled tasks' jobs.
    cancel: bool
    #: The component exports `costs` (contract 1.2): planned units carry cost estimates
    #: (each may still be unknown).
    costs: bool
    #: The component exports `provider` (contract 1.3): planned units carry expected
    #: durations, and the provider's published limits are read.
    provider: bool
    #: The component exports `routes` (contract 1.5): route targets may name its models.
    routes: bool
    #: Units choose their pool in `plan-routed`.
    routing: bool


class HandlerLoad(TypedDict):
    """
    One process's word on one release (`RecordWrite::handler_load_put`): `GET /v1/handlers`
    shows, per process, what it runs and what it could not load.
    """
    #: Unix ms of the process's last word on it: it rewrites its rows at every look at the
    #: releases, so an old `at` means the process has gone.
    at: int
    name: str
    #: The process: host, pid and a random suffix (new at each start).
    process: str
    reason: NotRequired[str | None]
    #: `api`, `scheduler` or `all`.
    role: str
    sha256: str
    #: `loaded` (serving), `draining` (replaced, kept for the provider jobs it created),
    #: `unloaded` or `failed` (see `reason`).
    state: str
    version: str


class HandlerVersionRow(TypedDict):
    """
    One row of the append-only handler version history: a state a handler file's version
    entered (loaded and active, refused, quarantined, unloaded).
    """
    #: When (Unix ms).
    at: int
    #: Row id (ascending with time); ignored when recording.
    id: int
    #: Declared handler name, when `describe` answered.
    name: NotRequired[str | None]
    #: The file the version came from.
    path: str
    #: Why it was refused, quarantined or unloaded.
    reason: NotRequired[str | None]
    #: sha256 of the file's content, hex.
    sha256: str
    #: `active`, `refused`, `quarantined` or `unloaded`.
    state: str
    #: Declared version, when `describe` answered.
    version: NotRequired[str | None]


class HandlerView(TypedDict):
    """One loaded handler as shown."""
    #: Crashing calls in a row so far (quarantine at `[limits] quarantine_after`).
    consecutive_faults: int
    #: The `slotd:handler` contract version the component was built against ("1.0.0" …
    #: "1.5.0").
    contract: str
    #: The optional parts of the contract it uses (`cancel`, `routing`: 1.1 and later; `costs`:
    #: 1.2).
    features: "Features"
    #: When this version was loaded (Unix ms).
    loaded_at: int
    name: str
    path: str
    pools: "list[PoolInfo]"
    #: sha256 of the component file, hex.
    sha256: str
    #: Always `active` in this list (the field matches `?all=true`).
    state: "VersionState"
    task_types: "list[TaskTypeInfo]"
    version: str


class Hold(TypedDict):
    level: int
    until: int


class IntervalView(TypedDict):
    """
    One unit's hold of a slot; another tenant's (for a non-admin) without unit, task or
    tenant.
    """
    #: It began before the window.
    clipped: bool
    #: Absent while the slot is still held.
    end_ms: NotRequired[int | None]
    outcome: NotRequired["Outcome | None"]
    slot: int
    start_ms: int
    task_id: NotRequired[str | None]
    tenant: NotRequired[str | None]
    unit_id: NotRequired[str | None]


class Latency(TypedDict):
    """Provider job durations over the window (jobs that ended in it)."""
    p50_ms: NotRequired[int | None]
    p95_ms: NotRequired[int | None]


class LeaseView(TypedDict):
    """Who holds a pool's lease, as any process sees it in Redis (the API shows it)."""
    #: The holding scheduler's owner id (`slotd_scheduler_info` on its metrics), if any.
    holder: NotRequired[str | None]
    #: Milliseconds the pool has spent without a holder between tenures, all told.
    unheld_ms_total: int


class Me(TypedDict):
    """Who the caller is."""
    #: An admin key (or loopback without keys): sees and acts on every tenant's tasks.
    admin: bool
    tenant: str


class MinuteStats(TypedDict):
    """One minute of the window."""
    #: Jobs that ended in this minute.
    ended: int
    #: Of those, the provider's over-capacity answers (1303).
    over_capacity: int
    #: Median duration at the provider of the jobs that ended in this minute (whole ones).
    p50_ms: NotRequired[int | None]
    p95_ms: NotRequired[int | None]
    #: Units that went back to pending without a job (retryable submit errors and
    #: over-capacity answers).
    returned: int
    start_ms: int


class PoolInfo(TypedDict):
    """A pool a handler proposes."""
    default_max_slots: int
    name: str


class PoolView(TypedDict):
    """One pool as shown."""
    #: The provider accounts the pool draws on (`[[handlers.NAME.accounts]]`); for a handler
    #: with one implicit account, empty, or while that account is drained, one entry named
    #: `default`. The pool's figures are their sums.
    accounts: "list[AccountView]"
    #: What the provider's capacity refusals taught about the pool's own slot set (the
    #: implicit account; named accounts show theirs): the learned ceiling, a refusal's
    #: back-off in force, the next probe, the last decision and the refusals read as noise or
    #: as a ceiling. `None` while nothing was refused.
    capacity: NotRequired["EstimateView | None"]
    #: While quotas hold every new submit back (a full window, or the provider's refusal
    #: closed every slot set of the pool): until when (Unix ms); pending units wait until then.
    closed_until: NotRequired[int | None]
    #: The provider's refusal that closed the pool's own slot set (the implicit account), with
    #: its words; named accounts show theirs in `accounts`.
    closure: NotRequired["Closure | None"]
    #: The limit the scheduler fills to now: `max_slots`, or lower while the provider has shown
    #: less room than configured (adaptive capacity after over-capacity answers).
    effective_max_slots: NotRequired[int | None]
    handlers: list[str]
    #: In a cluster (Redis configured): which scheduler drives the pool and how long it has
    #: gone without one between holders; `None` embedded, or when Redis could not be asked.
    lease: NotRequired["LeaseView | None"]
    #: The effective maximum; `None` for a pool that only stored units still name (its handler
    #: is not loaded and no operator setting mentions it).
    max_slots: NotRequired[int | None]
    #: Where `max_slots` comes from: `config` (the operator's `[pools]`, or the handler's
    #: proposal) or `discovered` (the provider published a lower limit, contract 1.3);
    #: `None` with `max_slots`.
    max_slots_source: NotRequired[str | None]
    name: str
    #: Its quotas on creates (`[pools."NAME"] rate`, `daily`): each dimension's limit, use,
    #: room and when it resets. Empty for a pool with slots only.
    quotas: "list[QuotaView]"
    #: The provider accounts whose limit the pool shares with other pools
    #: (`[provider_accounts.NAME]`): the account's slots in use over all its pools, this
    #: pool's share and what it holds of it, borrowed included.
    shared_accounts: "list[ShareView]"
    #: Its spend limit (`[pools."NAME"] spend`): the period's limit, reserved-or-spent cost,
    #: what is left and when the period ends. A spent pool is `closed_until` then too.
    spend: NotRequired["SpendView | None"]
    task_types: list[str]
    #: Unit counts by status (every status present, zeros included).
    units: dict[str, int]
    #: Slots held now; `None` when the slot store could not be asked (it is reported, not
    #: fatal: the database still answers everything else).
    used: NotRequired[int | None]


class Probe(TypedDict):
    """A probe's answer."""
    #: `ok` (`/healthz`) or `ready` (`/readyz`).
    status: str


class Problem(TypedDict):
    """The problem+json body (RFC 9457) of every error."""
    #: What went wrong with this request.
    detail: str
    #: The request field, query parameter or header at fault, for validation problems.
    field: NotRequired[str | None]
    #: The HTTP status, repeated.
    status: int
    #: Short human summary of the kind.
    title: str
    #: A stable URN naming the kind of problem (`urn:slotd:problem:not-found`, …).
    type: str


class PublishedView(TypedDict):
    """What publishing did."""
    #: `new`: stored now; `already`: this very file was published before (made current
    #: again).
    published: str
    release: "Release"
    #: The rollout started with it (`?rollout=`).
    rollout: NotRequired["Rollout | None"]


class QuotaView(TypedDict):
    """One dimension as `GET /v1/pools` shows it."""
    #: `rate` or `daily`.
    dimension: str
    #: Creates allowed in the window.
    limit: int
    remaining: int
    #: When the window next has room for one more create (Unix ms), while it is full; when
    #: the oldest counted create leaves it otherwise (absent when it counts none).
    resets_at: NotRequired[int | None]
    #: `config`: from `[pools."NAME"]` (or the account's section); `discovered`: published by
    #: the provider (contract 1.3), lower than any configured one. A discovered quota's limit
    #: and use are the provider's, its use counting other clients' creates too.
    source: str
    #: Creates counted in the window now.
    used: int
    #: The window, e.g. `rolling 1m` or `calendar day (UTC+08:00)`.
    window: str


class Received(TypedDict):
    """What a webhook did (for the provider's logs and for tests)."""
    #: Unit changes applied.
    applied: int
    #: Changes for units already past them (a repeat), ignored.
    ignored: int
    #: Changes the state machine or the token's scope refused.
    refused: int


class Release(TypedDict):
    """A release as listed: everything but its bytes."""
    contract: str
    name: str
    #: When it last became its handler's current release (Unix ms): at publishing, or when
    #: the plugins directory saw its file change (see [`current_releases`]).
    promoted_at: int
    #: Unix ms.
    published_at: int
    published_by: str
    #: Hex sha256 of the bytes: the release's key.
    sha256: str
    #: The file's size in bytes.
    size: int
    #: Published as able to take over the jobs of the releases before it: they move to it
    #: at once instead of finishing on the release that created them.
    takes_over: bool
    version: str
    #: When it was withdrawn (its file removed from the plugins directory), if it was: a
    #: withdrawn release is no handler's current one until promoted again.
    withdrawn_at: NotRequired[int | None]
    withdrawn_reason: NotRequired[str | None]


class ReleaseFollower(TypedDict):
    """A process following the releases, and when it last looked."""
    #: Unix ms of its last look at the releases.
    last_seen: int
    process: str
    #: `api`, `scheduler` or `all`.
    role: str


class ReleaseList(TypedDict):
    """`GET /v1/handlers/releases`."""
    #: The processes following the releases.
    processes: "list[ReleaseFollower]"
    #: Newest published first.
    releases: "list[ReleaseView]"
    #: The newest rollouts (at most 20), newest first: stage, state, why it moved, and the
    #: last judgement's figures beside the incumbent's.
    rollouts: "list[Rollout]"


class ReleaseView(Release):
    """One release as listed, with every process's word on it."""
    #: Whether it is its handler's current release (what processes load).
    current: bool
    #: Each process's word on it, heard within the last minute.
    processes: "list[HandlerLoad]"


class Retried(TypedDict):
    """What `POST /v1/tasks/{id}/retry` did."""
    #: Units moved back to `pending` (failed) or made due for finalization again.
    retried: int
    task_id: str


class Rollout(TypedDict):
    """A rollout as stored."""
    #: The release rolled out (sha256).
    candidate: str
    #: Its steps, oldest first (filled in by listings that show them).
    events: NotRequired["list[RolloutEvent]"]
    #: The last judgement's figures (JSON), if any.
    figures: NotRequired[dict[str, Any] | None]
    id: str
    #: The release serving when it started (sha256).
    incumbent: str
    #: How much higher the candidate's failure share may be than the incumbent's (0..1).
    margin: float
    #: Candidate units ended before a stage is judged.
    min_units: int
    #: The handler.
    name: str
    #: Why it last moved.
    reason: NotRequired[str | None]
    #: Index of the stage in force.
    stage: int
    stage_started_at: int
    #: Shares of new units per stage, in percent (the last is 100).
    stages: list[int]
    started_at: int
    state: "RolloutState"
    updated_at: int


class RolloutEvent(TypedDict):
    """One step of a rollout."""
    #: Unix ms.
    at: int
    reason: str
    #: Index of the stage it was at.
    stage: int
    state: "RolloutState"


class RolloutRequest(TypedDict):
    """Body of `POST /v1/handlers/{name}/rollout`."""
    action: "RolloutAction"


class RouteView(TypedDict):
    """One route as shown."""
    name: str
    #: Units waiting on the route for a target with room.
    pending: int
    #: `ordered`, `cheapest`, `fastest` or `weights`.
    policy: str
    targets: "list[TargetView]"


class ShareView(TypedDict):
    """A pool's share of a provider account that spans pools."""
    #: The provider account (`[provider_accounts.NAME]`).
    account: str
    #: Of those, above its `min`: borrowed from the other pools' idle share, given back as
    #: they free.
    borrowed: int
    #: Which of the pool's handler accounts is on it (`None`: the handler's implicit one).
    handler_account: NotRequired[str | None]
    #: Slots this pool holds on the account now.
    held: int
    #: The most this pool may hold.
    max: int
    #: The account's limit over every pool on it.
    max_slots: int
    #: Kept for this pool while it has work waiting.
    min: int
    #: What the account would let the pool take now.
    room: int
    #: Slots held over every pool on it now.
    used: int
    #: The pool has work waiting for a slot on the account (the other pools keep its unmet
    #: `min` free).
    waiting: bool


class SpendView(TypedDict):
    """A spend limit as `GET /v1/pools` shows it."""
    #: The most the period's creates may cost, in the provider's cost unit.
    limit: float
    #: The period, e.g. `30days`; periods are aligned to the Unix epoch.
    period: str
    remaining: float
    #: When the current period ends (Unix ms): its spend starts afresh then.
    resets_at: int
    #: Reserved (running submissions' estimates) and spent (settled, at the provider's
    #: reported cost where known) in the current period.
    used: float


class StageInfo(TypedDict):
    """A stage of a task type and the pool its jobs occupy."""
    #: Other pools `plan` may route this stage's units to (contract 1.1 `routing`).
    alt_pools: NotRequired[list[str]]
    name: str
    #: The stage's default pool.
    pool: str


class TargetPool(TypedDict):
    """A target's pool and its room."""
    effective_max_slots: int
    name: str
    #: Slots held now; `None` when the slot store could not be asked.
    used: NotRequired[int | None]


class TargetView(TypedDict):
    """One target of a route."""
    #: Free slots over its pools now.
    free: int
    handler: str
    #: The newest of them: what the provider said (admins only: it may quote another
    #: tenant's request).
    last_refusal: NotRequired[str | None]
    model: str
    #: The pools its handler draws on, with their room now.
    pools: "list[TargetPool]"
    #: Its refusals among the newest events, by reason.
    recent_refusals: dict[str, int]
    #: `ready`; or why it takes nothing: `handler not loaded`, `handler serves no routes`
    #: (contract before 1.5), `model not served`.
    state: str
    weight: NotRequired[int | None]


class TaskEvents(TypedDict):
    """`GET /v1/tasks/{id}/events` as JSON."""
    #: Oldest first.
    events: "list[UnitEvent]"
    task_id: str


class TaskList(TypedDict):
    """`GET /v1/tasks`: a page of the tenant's tasks."""
    #: Pass as `cursor` for the next page; absent on the last page.
    next_cursor: NotRequired[str | None]
    #: Newest first.
    tasks: "list[TaskSummary]"


class TaskSummary(TypedDict):
    """A task without its per-unit detail: what `GET /v1/tasks` lists."""
    #: The client asked to cancel the task. Its status stays `running` while units wait for
    #: their provider jobs to end (they keep their slots), then becomes `cancelled`.
    cancel_requested: bool
    #: Units completed.
    completed: int
    #: Unix milliseconds.
    created_at: int
    #: Complete by this time (Unix ms), if the task asked.
    deadline_at: NotRequired[int | None]
    #: `refuse` or `best_effort`, when the task has a deadline or start-by time.
    deadline_policy: NotRequired[str | None]
    idempotency_key: NotRequired[str | None]
    #: Human progress line ("3/12 completed, 2 running, 7 waiting"); after a cancel, it
    #: starts with how many units wait for their provider jobs to end.
    message: str
    priority: int
    #: Be submitted by this time (Unix ms), if the task asked.
    start_by: NotRequired[int | None]
    status: "TaskStatus"
    task_id: str
    #: The tenant that owns the task (an admin's lists mix tenants).
    tenant: str
    #: Units in the task.
    total: int
    type: str
    #: Unix milliseconds.
    updated_at: int


class TaskTypeInfo(TypedDict):
    """A task type a handler serves."""
    name: str
    stages: "list[StageInfo]"


class TaskView(TaskSummary):
    """`GET /v1/tasks/{id}` and the answer to a cancel."""
    #: Sum of the provider-reported costs, when any unit reported one.
    cost: NotRequired[float | None]
    #: Sum of the handler's cost estimates, when it gave any (contract 1.2).
    cost_estimate: NotRequired[float | None]
    #: For a failed task: the error (`{code?, message}`) of the first unit that failed or
    #: whose finalization gave up (code `finalize`; retrying the task finalizes it again).
    error: NotRequired[Any]
    #: When the task's jobs in its pool are expected to end (Unix ms), from the pool's free
    #: slots, the fill order and the provider's observed durations (see `eta.rs`); absent for
    #: a finished task, and until the pool has seen enough jobs end to say.
    estimated_completion_at: NotRequired[int | None]
    #: Units of its pool filled before the task's next waiting unit (0: it is next); absent
    #: when none of its units waits for a slot.
    queue_position: NotRequired[int | None]
    #: One entry per unit, by index.
    results: list[Any]
    #: The full unit records, when asked for with `?units=true`.
    units: NotRequired["list[Unit] | None"]


class TaskWebhooks(TypedDict):
    """`GET /v1/tasks/{id}/webhooks`."""
    #: Where the task's completion is delivered, if anywhere.
    callback_url: NotRequired[str | None]
    #: Oldest first.
    deliveries: "list[DeliveryView]"
    task_id: str


class TimelineView(TypedDict):
    """A pool's slot timeline."""
    intervals: "list[IntervalView]"
    #: Lanes used by `intervals` (a lane's intervals never overlap).
    lanes: int
    latency: "Latency"
    #: The pool's configured limit; absent for a pool only stored units name.
    max_slots: NotRequired[int | None]
    minutes: int
    now_ms: int
    #: Throughput and provider latency, minute by minute.
    per_minute: "list[MinuteStats]"
    pool: str
    #: The window: from `since_ms` to `now_ms` (Unix ms).
    since_ms: int
    #: The window held more slot changes than one answer reads; the oldest were left out.
    truncated: bool


class UnitTerms(TypedDict):
    """
    What a unit carries beyond its status: the provider account it was marked submitted on,
    its task's
    deadline terms (copied so the fill order stays one indexed query), the handler's
    estimate of
    its cost, and why it is waiting when it is due but not filled.
    """
    #: The account of the unit's latest submit marker (`None`: the handler's implicit
    #: account, or never submitted).
    account: NotRequired[str | None]
    #: `deadline_policy: best_effort`: an unreachable deadline is recorded, not enforced.
    best_effort: bool
    #: The handler's estimate of the unit's cost, in the provider's unit (contract 1.2).
    cost_estimate: NotRequired[float | None]
    #: Complete by this time (Unix ms), if the task asked for it.
    deadline_at: NotRequired[int | None]
    #: Be submitted by this time (Unix ms), if the task asked for it.
    start_by: NotRequired[int | None]
    #: Why a due `pending` unit is not being filled (`budget`), if it is held back.
    wait_reason: NotRequired[str | None]


class UnitReleases(TypedDict):
    """
    The handler releases behind a unit (docs/handlers.md, "Releases"), by sha256: the one
    whose
    `plan` made it and the one whose `tick` last submitted it (and created its current
    provider
    job, if it has one). The job's polls, provider callbacks, cancel and finalization go
    through
    the latter while it stays loaded; a rollout is judged on what each release's submissions
    came to.
    """
    job_release: NotRequired[str | None]
    planned_release: NotRequired[str | None]


class Unit(UnitTerms, UnitReleases):
    """One unit as stored. Times are Unix milliseconds (the scheduler's injected clock)."""
    #: Transient errors and handler faults spent from the retry budget in this stage.
    attempts: int
    #: When the client cancelled the unit while it was `submitted` (its job at the provider):
    #: it keeps its slot and is polled until the job ends, then becomes `cancelled`; it is
    #: never finalized and never submitted again.
    cancel_requested_at: NotRequired[int | None]
    cost: NotRequired[str | None]
    created_at: int
    #: Error JSON (`{"code":…, "message":…}`) of the last failure or transient error.
    error: NotRequired[str | None]
    id: str
    #: Position within the task, from 0.
    index: int
    #: When the unit may next be polled (submitted) or submitted (pending).
    next_at: int
    #: Polls in the current stage (drives the backoff).
    polls: int
    #: The pool the current stage occupies.
    pool: str
    #: Task priority, copied so that fill order is one indexed query.
    priority: int
    provider_job_id: NotRequired[str | None]
    #: Result JSON, once succeeded (and, after finalization, with the stored artifacts).
    result: NotRequired[str | None]
    #: Pools chosen by the handler's `plan-routed` (contract 1.1), as a JSON object
    #: `{"stage": "pool"}`; stages not named use their default pool.
    routes: NotRequired[str | None]
    #: A routed unit's options and binding (docs/routes.md), as JSON [`super::UnitRouting`];
    #: `None` for a unit of a handler's own task type.
    routing: NotRequired[str | None]
    #: Handler-defined description of the work (JSON from `plan`).
    spec: str
    stage: str
    #: Handler-private state (JSON).
    state: str
    status: "UnitStatus"
    #: Submit attempt of the current stage; part of the idempotency key. Incremented only by a
    #: deliberate resubmission (explicit retry of a failed unit), since the provider keeps
    #: failed jobs' client ids.
    submit_attempt: int
    submitted_at: NotRequired[int | None]
    task_id: str
    task_type: str
    tenant: str
    updated_at: int


class UnitEvent(TypedDict):
    """One row of the append-only unit event log."""
    at: int
    #: What happened ("accepted job 123", "capacity rejected", "handler fault: trap", …).
    detail: NotRequired[str | None]
    error: NotRequired[str | None]
    from_status: NotRequired[str | None]
    id: int
    stage: str
    task_id: str
    to_status: str
    unit_id: str


class Usage(TypedDict):
    """A tenant's spending in the current period."""
    #: End of the period (Unix ms): reservations start afresh then.
    period_end: int
    #: Start of the period (Unix ms), aligned to the epoch.
    period_start: int
    #: Estimates reserved by submissions still running.
    reserved: float
    #: Settled cost of the submissions that ended (provider-reported where known).
    spent: float
    #: Submissions counted (ended and running).
    submissions: int


class UsageView(TypedDict):
    """A tenant's budget and what it has used in the current period."""
    #: The budget in force; absent when the tenant has none (its use is then not reserved,
    #: only the provider's costs are summed).
    budget: NotRequired["Budget | None"]
    #: The current period's figures; absent without a budget.
    period: NotRequired["Usage | None"]
    #: What is left this period: limit − spent − reserved (never below 0).
    remaining: NotRequired[float | None]
    tenant: str
    #: Over every unit the tenant ever ran: the provider-reported cost, and the handlers'
    #: estimates.
    total_cost: float
    total_estimated: float


class VersionRecord(TypedDict):
    """One version of one handler file, as the API shows it."""
    #: When it last changed state (Unix ms).
    changed_at: int
    #: Declared handler name; `None` when refused before `describe` answered.
    name: NotRequired[str | None]
    #: The file it came from.
    path: str
    #: Why it was refused, quarantined or unloaded.
    reason: NotRequired[str | None]
    #: When this version was first seen (Unix ms).
    seen_at: int
    #: sha256 of the file's content, hex.
    sha256: str
    state: "VersionState"
    #: Declared version; `None` when refused before `describe` answered.
    version: NotRequired[str | None]


class WebhookList(TypedDict):
    """`GET /v1/webhooks`."""
    #: Newest first.
    deliveries: "list[DeliverySummary]"


#: `GET /v1/handlers`: the active handlers, or with `?all=true` every version seen.
HandlerList = Union[list[HandlerView], list[VersionRecord]]
