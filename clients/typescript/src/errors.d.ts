import type { TaskStatus } from './models.js';

/** An error answer from slotd, with its problem+json fields (RFC 9457). */
export declare class SlotdError extends Error {
  readonly name: 'SlotdError';
  /** The HTTP status. */
  readonly status: number;
  /** The problem type, a URN such as `urn:slotd:problem:validation` (`about:blank` for a non-problem answer). */
  readonly type: string;
  /** Short human summary of the kind. */
  readonly title: string;
  /** What went wrong with this request. */
  readonly detail: string;
  /** The request field, query parameter or header at fault (400 and 422), e.g. `count` or `Last-Event-ID`. */
  readonly field: string | undefined;
  /** The whole problem+json body, extra members included. */
  readonly problem: { type?: string; title?: string; status?: number; detail?: string; field?: string | null; [key: string]: unknown };
  /** Seconds to wait before retrying, from `Retry-After` (429 and 503). */
  readonly retryAfter: number | undefined;
  readonly method: string;
  readonly url: string;
  /** Requests made, retries after 429/503 included. */
  readonly attempts: number;
}

/** A request that got no answer (connection refused or reset, DNS failure, client-side timeout, a stream that kept failing). */
export declare class SlotdConnectionError extends Error {
  readonly name: 'SlotdConnectionError';
}

/** `wait` gave up: the task had not ended within `timeoutMs`. */
export declare class SlotdTimeoutError extends Error {
  readonly name: 'SlotdTimeoutError';
  readonly taskId: string;
  readonly timeoutMs: number;
  /** The task's status when last seen. */
  readonly lastStatus: TaskStatus | undefined;
}
