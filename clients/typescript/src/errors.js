// The errors the client throws. Every answer slotd gives as an error is a SlotdError carrying
// the problem+json fields; a request that got no answer is a SlotdConnectionError; `wait`
// running out of time is a SlotdTimeoutError.

/** An error answer from slotd (`application/problem+json`, RFC 9457). */
export class SlotdError extends Error {
  /**
   * @param {object} init
   * @param {number} init.status
   * @param {Record<string, unknown>} init.problem the problem+json body (or one made up from a non-JSON answer)
   * @param {string} init.method
   * @param {string} init.url
   * @param {number | undefined} init.retryAfter seconds, from `Retry-After`
   * @param {number} init.attempts
   */
  constructor({ status, problem, method, url, retryAfter, attempts }) {
    const title = typeof problem.title === 'string' ? problem.title : `HTTP ${status}`;
    const detail = typeof problem.detail === 'string' ? problem.detail : '';
    const field = typeof problem.field === 'string' ? problem.field : undefined;
    let message = `slotd answered ${status} ${title}`;
    if (detail) message += `: ${detail}`;
    if (field) message += ` (field \`${field}\`)`;
    message += ` [${method} ${url}`;
    if (attempts > 1) message += `, after ${attempts} attempts`;
    message += ']';
    super(message);
    this.name = 'SlotdError';
    /** The HTTP status. */
    this.status = status;
    /** The problem type, a URN such as `urn:slotd:problem:validation` (`about:blank` when the answer was not problem+json). */
    this.type = typeof problem.type === 'string' ? problem.type : 'about:blank';
    this.title = title;
    this.detail = detail;
    /** The request field, query parameter or header at fault (400 and 422). */
    this.field = field;
    /** The whole problem body, extra members included. */
    this.problem = problem;
    /** Seconds to wait before retrying, from `Retry-After` (429 and 503). */
    this.retryAfter = retryAfter;
    this.method = method;
    this.url = url;
    /** Requests made, retries after 429/503 included. */
    this.attempts = attempts;
  }
}

/** A request that got no answer (refused connection, reset, DNS failure, client-side timeout). */
export class SlotdConnectionError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'SlotdConnectionError';
  }
}

/** `wait` gave up: the task had not ended within the time given. */
export class SlotdTimeoutError extends Error {
  /**
   * @param {string} taskId
   * @param {number} timeoutMs
   * @param {string | undefined} lastStatus the task's status when last seen
   */
  constructor(taskId, timeoutMs, lastStatus) {
    super(
      `task ${taskId} did not end within ${timeoutMs} ms` +
        (lastStatus ? ` (its status when last seen: ${lastStatus})` : ''),
    );
    this.name = 'SlotdTimeoutError';
    this.taskId = taskId;
    this.timeoutMs = timeoutMs;
    this.lastStatus = lastStatus;
  }
}
