// A TCP proxy in front of a real server that a test cuts and restores: the way to drop a live
// event stream for real (the client sees its connection reset mid-stream, as behind a load
// balancer that restarts), without touching the client or the server.

import { createServer, connect } from 'node:net';

export async function startTcpProxy(targetPort, targetHost = '127.0.0.1') {
  const pairs = new Set();
  let refusing = false;
  let accepted = 0;
  const server = createServer((client) => {
    accepted++;
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = connect(targetPort, targetHost);
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    /** Connections accepted so far (refused ones included). */
    get accepted() {
      return accepted;
    },
    /** Open connections right now. */
    get open() {
      return pairs.size;
    },
    /** Reset every open connection and refuse new ones until `restore()`. */
    cut() {
      refusing = true;
      for (const { client, upstream } of pairs) {
        client.resetAndDestroy?.() ?? client.destroy();
        upstream.destroy();
      }
      pairs.clear();
    },
    /**
     * Stop forwarding what the server sends on every open connection, leaving them open: a
     * connection gone silent (a NAT or proxy that dropped it without a word). New connections
     * are not affected.
     */
    freeze() {
      for (const { client, upstream } of pairs) {
        upstream.unpipe(client);
        upstream.pause();
      }
    },
    /** Let connections through again. */
    restore() {
      refusing = false;
    },
    close() {
      refusing = true;
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
