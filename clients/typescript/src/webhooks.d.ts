import type { VerifyOptions, WebhookBody, WebhookEvent, WebhookHeaders, WebhookSecret } from './webhook-core.js';

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

/**
 * Verify a slotd completion webhook (Standard Webhooks, node:crypto) and return the event it
 * carries. `body` is the raw request body. Throws WebhookVerificationError naming the check
 * that failed: a missing header, a timestamp outside the window, or no matching signature.
 */
export declare function verifyWebhook<T = WebhookEvent>(
  secret: WebhookSecret,
  headers: WebhookHeaders,
  body: WebhookBody,
  options?: VerifyOptions,
): T;

/** The `webhook-signature` value (`v1,<base64>`) for one message: for testing a receiver. */
export declare function signWebhook(secret: WebhookSecret, id: string, timestamp: number, body: WebhookBody): string;
