// A server-sent events parser over a fetch body (WHATWG HTML, "Parsing an event stream"):
// lines end with CRLF, LF or CR; `:` starts a comment; `event`, `data`, `id` and `retry`
// fields; an empty line dispatches. Works wherever ReadableStream and TextDecoder exist
// (Node 18+, browsers, edge runtimes).

/**
 * @typedef {object} SseMessage
 * @property {string} event  the event type (`message` when the stream named none)
 * @property {string} data   the data lines, joined by `\n`
 * @property {string} lastEventId  the last event id seen on this stream so far (`id:` persists across events)
 * @property {boolean} hasId  whether this very message carried an `id:` field
 */

/**
 * Parse `body` into messages. Comments (keep-alives) are reported through `onActivity`, as is
 * every chunk, so a caller can notice a silent connection.
 *
 * @param {ReadableStream<Uint8Array>} body
 * @param {{ onRetry?: (ms: number) => void, onActivity?: () => void }} [hooks]
 * @returns {AsyncGenerator<SseMessage>}
 */
export async function* parseEventStream(body, hooks = {}) {
  const reader = body.getReader();
  const decoder = new TextDecoder('utf-8');
  let buffer = '';
  let first = true;
  let event = '';
  let data = [];
  let lastEventId = '';
  let hasId = false;
  let pendingCR = false;

  function* lines(text, final) {
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 10 /* \n */ || c === 13 /* \r */) {
        yield text.slice(start, i);
        if (c === 13 && text.charCodeAt(i + 1) === 10) i++;
        start = i + 1;
      }
    }
    buffer = text.slice(start);
    if (final && buffer) {
      // An unterminated last line is dropped by the spec (no dispatch without a blank line).
      buffer = '';
    }
  }

  function* field(line) {
    if (line === '') {
      if (data.length > 0) {
        yield { event: event || 'message', data: data.join('\n'), lastEventId, hasId };
      }
      event = '';
      data = [];
      hasId = false;
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (name) {
      case 'event':
        event = value;
        break;
      case 'data':
        data.push(value);
        break;
      case 'id':
        if (!value.includes('\0')) {
          lastEventId = value;
          hasId = true;
        }
        break;
      case 'retry':
        if (/^[0-9]+$/.test(value)) hooks.onRetry?.(Number(value));
        break;
      default:
        break;
    }
  }

  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      hooks.onActivity?.();
      let text = decoder.decode(value, { stream: true });
      if (first && text.length > 0) {
        if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
        first = false;
      }
      // A CR that ended the previous chunk may be the first half of a CRLF.
      if (pendingCR && text.startsWith('\n')) text = text.slice(1);
      pendingCR = text.endsWith('\r');
      for (const line of lines(buffer + text, false)) yield* field(line);
    }
    const rest = decoder.decode();
    for (const line of lines(buffer + rest, true)) yield* field(line);
  } finally {
    reader.cancel().catch(() => {});
  }
}
