export * from './models.js';
export type { TaskArtifact, TaskError, TaskResult, TaskResultRoute } from './results.js';
export {
  SlotdClient,
  isTerminal,
  type BudgetInput,
  type CallOptions,
  type EndMessage,
  type GetOptions,
  type ListFilter,
  type ReconnectInfo,
  type RetryInfo,
  type SlotdClientOptions,
  type StreamOptions,
  type SubmitOptions,
  type UnitMessage,
  type WaitOptions,
  type WatchMessage,
} from './client.js';
export { SlotdConnectionError, SlotdError, SlotdTimeoutError } from './errors.js';
export {
  DEFAULT_TOLERANCE_SECONDS,
  WebhookVerificationError,
  type VerifyOptions,
  type WebhookBody,
  type WebhookEvent,
  type WebhookHeaders,
  type WebhookSecret,
  type WebhookVerificationCode,
} from './webhook-core.js';
export { signWebhookAsync, verifyWebhookAsync } from './webhooks-web.js';
