// Type-checked only (tsc --noEmit in run-tests.sh), never run: every public call of the
// package as a user writes it, with the types the calls must give. A change of the
// declarations that breaks one of these lines fails the suite.

import {
  SlotdClient,
  SlotdConnectionError,
  SlotdError,
  SlotdTimeoutError,
  WebhookVerificationError,
  DEFAULT_TOLERANCE_SECONDS,
  isTerminal,
  signWebhookAsync,
  verifyWebhookAsync,
  type Accepted,
  type EventsPage,
  type HandlerVersionRow,
  type HandlerView,
  type Me,
  type PoolView,
  type Problem,
  type ReleaseList,
  type Retried,
  type RouteView,
  type TaskEvents,
  type TaskList,
  type TaskResult,
  type TaskStatus,
  type TaskSummary,
  type TaskView,
  type TaskWebhooks,
  type TimelineView,
  type UnitEvent,
  type UsageView,
  type VersionRecord,
  type WatchMessage,
  type WebhookEvent,
  type WebhookList,
} from '@slotd/client';

function exact<T>(value: T): T {
  return value;
}

export async function everyCall(): Promise<void> {
  const client = new SlotdClient({
    baseUrl: 'http://127.0.0.1:8080',
    apiKey: 'key-of-team-a',
    maxRetries: 2,
    maxRetryDelayMs: 10_000,
    timeoutMs: 30_000,
    headers: { 'x-request-source': 'usage' },
    onRetry: (info) => exact<number>(info.delayMs + info.status + info.error.status),
  });
  exact<string>(client.baseUrl);

  const accepted = exact<Accepted>(
    await client.submit('video', { shots: [{ prompt: 'a cat' }] }, {
      idempotencyKey: 'order-42',
      priority: 5,
      callbackUrl: 'https://example.com/hook',
      deadline: new Date(),
      startBy: '2030-01-01T00:00:00Z',
      deadlinePolicy: 'best_effort',
    }),
  );
  exact<TaskStatus>(accepted.status);
  // @ts-expect-error the payload is an object of the task type's fields
  await client.submit('video', 'not an object');
  // @ts-expect-error deadline_policy is refuse or best_effort
  await client.submit('video', {}, { deadlinePolicy: 'sometimes' });

  const view = exact<TaskView>(await client.get(accepted.task_id, { units: true }));
  const first = exact<TaskResult | undefined>(view.results[0]);
  exact<string | undefined>(first?.object_key);
  exact<string | null | undefined>(view.error?.code);
  exact<number | null | undefined>(view.queue_position);
  exact<boolean>(isTerminal(view.status));

  exact<TaskList>(await client.listPage({ type: 'video', status: 'failed', limit: 10, cursor: 'x', tenant: 't' }));
  for await (const page of client.listPages({ limit: 100 })) exact<string | null | undefined>(page.next_cursor);
  for await (const task of client.list({ limit: 100 })) exact<TaskSummary>(task);
  // @ts-expect-error status is a unit status
  await client.listPage({ status: 'sleeping' });

  exact<TaskView>(await client.cancel(accepted.task_id));
  exact<Retried>(await client.retry(accepted.task_id));
  exact<TaskEvents>(await client.events(accepted.task_id));
  exact<EventsPage>(await client.tenantEvents({ after: '1.2.3' }));
  exact<TaskWebhooks>(await client.webhooks(accepted.task_id));
  exact<WebhookList>(await client.listWebhooks({ status: 'delivered', limit: 5 }));

  const stop = new AbortController();
  for await (const message of client.watch(accepted.task_id, {
    signal: stop.signal,
    lastEventId: '1.2.3',
    reconnectDelayMs: 500,
    maxReconnects: 5,
    idleTimeoutMs: 60_000,
    onReconnect: (info) => exact<string | undefined>(info.lastEventId),
  })) {
    const m = exact<WatchMessage>(message);
    if (m.type === 'unit') {
      exact<UnitEvent>(m.event);
      exact<string>(m.id);
    } else {
      exact<TaskStatus>(m.status);
    }
  }
  for await (const message of client.watchAll({ signal: stop.signal })) exact<string>(message.event.task_id);
  exact<TaskView>(await client.wait(accepted.task_id, { timeoutMs: 60_000, signal: stop.signal }));

  exact<PoolView[]>(await client.pools());
  exact<TimelineView>(await client.poolTimeline('kling:video', { minutes: 5 }));
  exact<RouteView[]>(await client.routes());
  exact<HandlerView[]>(await client.handlers());
  exact<VersionRecord[]>(await client.handlers({ all: true }));
  exact<HandlerVersionRow[]>(await client.handlerHistory({ name: 'kling-video', limit: 10 }));
  exact<ReleaseList>(await client.handlerReleases({ name: 'kling-video' }));
  exact<Me>(await client.me());
  exact<UsageView>(await client.setBudget('team-a', { limit: 500, period: '1d' }));
  exact<UsageView>(await client.usage('team-a'));
  exact<Problem>(await client.request<Problem>('GET', '/v1/me', { query: { x: 1 } }));
  // A POST the caller knows is safe to send again after a 503 timeout.
  await client.request('POST', '/v1/handlers/kling-video/rollout', { body: { action: 'pause' }, idempotent: true });

  try {
    await client.get('nope');
  } catch (e) {
    if (e instanceof SlotdError) {
      exact<number>(e.status);
      exact<string | undefined>(e.field);
      exact<number | undefined>(e.retryAfter);
      exact<unknown>(e.problem['extra']);
    } else if (e instanceof SlotdTimeoutError) {
      exact<string>(e.taskId);
    } else if (e instanceof SlotdConnectionError) {
      exact<string>(e.message);
    }
  }

  const headers = new Headers();
  exact<string>(await signWebhookAsync('whsec_AAAA', 'msg_1', 1_700_000_000, new Uint8Array([1])));
  exact<number>(DEFAULT_TOLERANCE_SECONDS);
  const event = exact<WebhookEvent>(await verifyWebhookAsync('whsec_AAAA', headers, '{}', { toleranceSeconds: 60 }));
  exact<TaskView>(event.data);
  try {
    await verifyWebhookAsync('whsec_AAAA', { 'webhook-id': 'x' }, new Uint8Array());
  } catch (e) {
    if (e instanceof WebhookVerificationError) exact<string>(e.code);
  }
}
