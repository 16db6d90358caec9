// @slotd/client: the slotd API for Node 20+, browsers and edge runtimes.

export { SlotdClient, isTerminal } from './client.js';
export { SlotdConnectionError, SlotdError, SlotdTimeoutError } from './errors.js';
export { DEFAULT_TOLERANCE_SECONDS, WebhookVerificationError } from './webhook-core.js';
export { signWebhookAsync, verifyWebhookAsync } from './webhooks-web.js';
