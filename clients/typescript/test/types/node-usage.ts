// Type-checked only: a Node receiver of slotd's completion webhooks, as README.md shows it.

import { createServer } from 'node:http';

import { SlotdError } from '@slotd/client';
import {
  WebhookVerificationError,
  signWebhook,
  verifyWebhook,
  type WebhookEvent,
} from '@slotd/client/webhooks';

const secret = process.env.SLOTD_WEBHOOK_SECRET ?? 'whsec_AAAA';

export const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    try {
      const event: WebhookEvent = verifyWebhook(secret, req.headers, Buffer.concat(chunks), { toleranceSeconds: 300 });
      console.log(event.type, event.data.task_id, event.data.results.length);
      res.writeHead(204).end();
    } catch (e) {
      if (!(e instanceof WebhookVerificationError)) throw e;
      res.writeHead(400).end(e.code);
    }
  });
});

export const header: string = signWebhook(secret, 'msg_1', 1_700_000_000, '{}');
export const isError = (e: unknown): boolean => e instanceof SlotdError;
