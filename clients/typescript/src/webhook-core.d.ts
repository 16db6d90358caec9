import type { TaskView } from './models.js';

/** Which check refused a webhook. */
export type WebhookVerificationCode =
  | 'missing_header'
  | 'invalid_timestamp'
  | 'timestamp_too_old'
  | 'timestamp_in_future'
  | 'invalid_signature'
  | 'invalid_secret'
  | 'invalid_payload';

/** Why a webhook was refused; answer it 400 (or 401) and do not act on it. */
export declare class WebhookVerificationError extends Error {
  readonly name: 'WebhookVerificationError';
  readonly code: WebhookVerificationCode;
}

/** The default replay window, in seconds (300). */
export declare const DEFAULT_TOLERANCE_SECONDS: number;

/** A completion webhook's body: the task's end and its view. */
export interface WebhookEvent {
  type: 'task.completed' | 'task.failed' | 'task.cancelled';
  /** When the delivery was queued (Unix ms). */
  timestamp: number;
  data: TaskView;
}

/** The request headers: a fetch `Headers`, a `Map`, or an object such as Node's `req.headers`. */
export type WebhookHeaders =
  | { get(name: string): string | null }
  | Map<string, string>
  | Record<string, string | string[] | undefined>;

/** The raw request body, exactly as received. */
export type WebhookBody = string | Uint8Array | ArrayBuffer | ArrayBufferView;

/** `whsec_<base64>` (as in `[webhooks] secret`), bare base64, or the key's bytes. */
export type WebhookSecret = string | Uint8Array;

export interface VerifyOptions {
  /** How far the `webhook-timestamp` may be from now, in seconds (default 300). */
  toleranceSeconds?: number;
  /** The receiver's clock (a Date or Unix ms; default now). */
  now?: Date | number;
}
