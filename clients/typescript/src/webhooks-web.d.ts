import type { VerifyOptions, WebhookBody, WebhookEvent, WebhookHeaders, WebhookSecret } from './webhook-core.js';

/**
 * Verify a slotd completion webhook with WebCrypto and return the event it carries. Rejects
 * with WebhookVerificationError naming the check that failed.
 */
export declare function verifyWebhookAsync<T = WebhookEvent>(
  secret: WebhookSecret,
  headers: WebhookHeaders,
  body: WebhookBody,
  options?: VerifyOptions,
): Promise<T>;

/** The `webhook-signature` value (`v1,<base64>`) for one message, with WebCrypto: for testing a receiver. */
export declare function signWebhookAsync(
  secret: WebhookSecret,
  id: string,
  timestamp: number,
  body: WebhookBody,
): Promise<string>;
