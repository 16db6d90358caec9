// What the Node and the WebCrypto webhook verifiers share: reading the three Standard Webhooks
// headers, the secret, the body and the timestamp window, and the errors. No platform imports.
//
// The scheme (https://www.standardwebhooks.com, as slotd signs its completion webhooks):
// `webhook-signature` is a space-separated list of `v1,<base64 HMAC-SHA256>` over
// `"{webhook-id}.{webhook-timestamp}.{body}"`, keyed with the base64 part of `whsec_…`.

/** Why a webhook was refused; `code` says which check failed. */
export class WebhookVerificationError extends Error {
  /**
   * @param {'missing_header' | 'invalid_timestamp' | 'timestamp_too_old' | 'timestamp_in_future' | 'invalid_signature' | 'invalid_secret' | 'invalid_payload'} code
   * @param {string} message
   */
  constructor(code, message) {
    super(message);
    this.name = 'WebhookVerificationError';
    this.code = code;
  }
}

/** The default window around the receiver's clock, in seconds (the scheme's advice). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

/** A header from a Headers object, a Map, or a plain object (any case; Node's arrays joined). */
export function headerOf(headers, name) {
  if (!headers || typeof headers !== 'object') {
    throw new TypeError('headers must be a Headers object, a Map or an object of header values');
  }
  if (typeof headers.get === 'function' && !(headers instanceof Map)) {
    return headers.get(name) ?? undefined;
  }
  const entries = headers instanceof Map ? headers.entries() : Object.entries(headers);
  for (const [key, value] of entries) {
    if (key.toLowerCase() !== name) continue;
    if (value === undefined || value === null) return undefined;
    return Array.isArray(value) ? value.join(' ') : String(value);
  }
  return undefined;
}

/** The HMAC key of a secret: `whsec_<base64>`, bare base64, or the key's bytes. */
export function secretKey(secret) {
  if (secret instanceof Uint8Array) {
    if (secret.length === 0) throw new WebhookVerificationError('invalid_secret', 'the webhook secret is empty');
    return secret;
  }
  if (typeof secret !== 'string' || secret.length === 0) {
    throw new WebhookVerificationError('invalid_secret', 'the webhook secret must be a non-empty string (whsec_…) or bytes');
  }
  const encoded = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) || encoded.replace(/=+$/, '').length % 4 === 1) {
    throw new WebhookVerificationError('invalid_secret', 'the webhook secret is not whsec_ followed by base64');
  }
  const bytes = fromBase64(encoded);
  if (bytes.length === 0) throw new WebhookVerificationError('invalid_secret', 'the webhook secret is empty after whsec_');
  return bytes;
}

/** The raw body as bytes. Parsed JSON is refused: the signature covers the exact bytes sent. */
export function bodyBytes(body) {
  if (typeof body === 'string') return new TextEncoder().encode(body);
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError(
    'body must be the raw request body (a string, Buffer, Uint8Array or ArrayBuffer), not parsed JSON: ' +
      'the signature covers the exact bytes sent',
  );
}

/**
 * The checks that need no key: the three headers are there and the timestamp is within the
 * window. Returns what the signature check needs.
 */
export function readRequest(headers, options = {}) {
  const { toleranceSeconds = DEFAULT_TOLERANCE_SECONDS, now } = options;
  const get = (name) => {
    const value = headerOf(headers, name);
    if (value === undefined || value === '') {
      throw new WebhookVerificationError('missing_header', `the ${name} header is missing`);
    }
    return value;
  };
  const id = get('webhook-id');
  const timestampText = get('webhook-timestamp').trim();
  const signatures = get('webhook-signature');
  if (!/^[0-9]{1,15}$/.test(timestampText)) {
    throw new WebhookVerificationError(
      'invalid_timestamp',
      `webhook-timestamp ${JSON.stringify(timestampText)} is not a number of seconds`,
    );
  }
  const timestamp = Number(timestampText);
  const nowSeconds = Math.floor((now === undefined ? Date.now() : now instanceof Date ? now.getTime() : now) / 1000);
  if (nowSeconds - timestamp > toleranceSeconds) {
    throw new WebhookVerificationError(
      'timestamp_too_old',
      `webhook-timestamp ${timestamp} is ${nowSeconds - timestamp} s old, more than the ${toleranceSeconds} s allowed (a replay, or a clock off)`,
    );
  }
  if (timestamp - nowSeconds > toleranceSeconds) {
    throw new WebhookVerificationError(
      'timestamp_in_future',
      `webhook-timestamp ${timestamp} is ${timestamp - nowSeconds} s ahead of this clock, more than the ${toleranceSeconds} s allowed`,
    );
  }
  const candidates = signatures
    .split(' ')
    .filter((s) => s.startsWith('v1,'))
    .map((s) => s.slice(3));
  if (candidates.length === 0) {
    throw new WebhookVerificationError('invalid_signature', 'webhook-signature holds no v1 signature');
  }
  return { id, timestamp, candidates };
}

/** The signed content: `"{id}.{timestamp}."` followed by the body bytes. */
export function signedContent(id, timestamp, body) {
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const out = new Uint8Array(prefix.length + body.length);
  out.set(prefix, 0);
  out.set(body, prefix.length);
  return out;
}

/** Compare two strings without an early exit on the first difference. */
export function constantTimeEqual(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** After the signature matched: the body as the event it carries. */
export function parseEvent(body) {
  const text = new TextDecoder('utf-8', { fatal: false }).decode(body);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new WebhookVerificationError('invalid_payload', `the signed body is not JSON: ${e.message}`);
  }
}

export function signatureMismatch() {
  return new WebhookVerificationError(
    'invalid_signature',
    'no webhook signature matches: the body, webhook-id or webhook-timestamp was altered, or the secret is not the sender\'s',
  );
}

export function toBase64(bytes) {
  let binary = '';
  for (let i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]);
  return btoa(binary);
}

export function fromBase64(text) {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}
