// Standard Webhooks verification with WebCrypto (`crypto.subtle`): for browsers' service
// workers, edge runtimes (Next.js middleware, Cloudflare Workers) and Node alike. Async,
// because WebCrypto is. On Node, `@slotd/client/webhooks` also offers a synchronous
// `verifyWebhook` over node:crypto.

import {
  bodyBytes,
  constantTimeEqual,
  parseEvent,
  readRequest,
  secretKey,
  signatureMismatch,
  signedContent,
  toBase64,
} from './webhook-core.js';

function subtle() {
  const s = globalThis.crypto?.subtle;
  if (!s) throw new Error('WebCrypto (crypto.subtle) is not available here; on Node use verifyWebhook from @slotd/client/webhooks');
  return s;
}

async function hmacBase64(key, content) {
  const k = await subtle().importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return toBase64(new Uint8Array(await subtle().sign('HMAC', k, content)));
}

/**
 * Verify a slotd completion webhook and return the event it carries
 * (`{type, timestamp, data}`). Throws WebhookVerificationError naming the check that failed.
 */
export async function verifyWebhookAsync(secret, headers, body, options = {}) {
  const key = secretKey(secret);
  const bytes = bodyBytes(body);
  const { id, timestamp, candidates } = readRequest(headers, options);
  const expected = await hmacBase64(key, signedContent(id, timestamp, bytes));
  if (!candidates.some((c) => constantTimeEqual(c, expected))) throw signatureMismatch();
  return parseEvent(bytes);
}

/** The `webhook-signature` value (`v1,<base64>`) for one message: for testing a receiver. */
export async function signWebhookAsync(secret, id, timestamp, body) {
  const key = secretKey(secret);
  return `v1,${await hmacBase64(key, signedContent(id, timestamp, bodyBytes(body)))}`;
}
