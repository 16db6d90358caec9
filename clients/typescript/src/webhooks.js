// Standard Webhooks verification for Node (node:crypto, synchronous): what a Node receiver of
// slotd's completion webhooks calls before acting on one. `@slotd/client` itself stays free of
// Node imports; its `verifyWebhookAsync` (WebCrypto) runs anywhere.

import { createHmac, timingSafeEqual } from 'node:crypto';

import {
  bodyBytes,
  parseEvent,
  readRequest,
  secretKey,
  signatureMismatch,
  signedContent,
} from './webhook-core.js';

export { DEFAULT_TOLERANCE_SECONDS, WebhookVerificationError } from './webhook-core.js';
export { signWebhookAsync, verifyWebhookAsync } from './webhooks-web.js';

function hmac(key, content) {
  return createHmac('sha256', key).update(content).digest();
}

/**
 * Verify a slotd completion webhook and return the event it carries
 * (`{type, timestamp, data}`). `body` is the raw request body (string or bytes). Throws
 * WebhookVerificationError naming the check that failed: a missing header, a timestamp outside
 * `toleranceSeconds` (default 300) of now, or no matching signature.
 */
export function verifyWebhook(secret, headers, body, options = {}) {
  const key = secretKey(secret);
  const bytes = bodyBytes(body);
  const { id, timestamp, candidates } = readRequest(headers, options);
  const expected = hmac(key, signedContent(id, timestamp, bytes));
  const matched = candidates.some((candidate) => {
    const given = Buffer.from(candidate, 'base64');
    // Buffer.from drops what is not base64; compare only exact re-encodings.
    return given.length === expected.length && given.toString('base64') === candidate && timingSafeEqual(given, expected);
  });
  if (!matched) throw signatureMismatch();
  return parseEvent(bytes);
}

/** The `webhook-signature` value (`v1,<base64>`) for one message: for testing a receiver. */
export function signWebhook(secret, id, timestamp, body) {
  const key = secretKey(secret);
  return `v1,${hmac(key, signedContent(id, timestamp, bodyBytes(body))).toString('base64')}`;
}
