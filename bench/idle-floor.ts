/**
 * `node dist/bench/idle-floor.js PORT`: the Node.js floor of the idle-connection benchmark (idle.ts). It accepts
 * MQTT connections on 127.0.0.1:PORT, answers each CONNECT with a CONNACK and each SUBSCRIBE with a SUBACK, fixed
 * bytes, and keeps nothing but the sockets: what a connection that made the same handshake costs Node.js itself.
 *
 * It first allocates ~160 MB of short-lived objects, so that its young generation is as large and as touched as a
 * broker's that has been running (started with `--min-semi-space-size=16`, see idle.ts); otherwise its first
 * connections would be charged with V8 growing it.
 */
import { createServer, type Socket } from 'node:net';

// Kept reachable from a global, so that the compiler cannot leave the allocations out.
const g = globalThis as { floorSink?: unknown };
for (let i = 0; i < 5_000_000; i++) g.floorSink = { i };
delete g.floorSink;

const CONNACK = Buffer.from([0x20, 0x02, 0x00, 0x00]);
const held = new Set<Socket>();

const server = createServer({ noDelay: true }, (s) => {
  held.add(s);
  s.on('error', () => undefined);
  s.on('close', () => held.delete(s));
  // Each test client's packets arrive whole: one per read, or several.
  s.on('data', (b: Buffer) => {
    let p = 0;
    while (p + 1 < b.length) {
      const type = b[p] >> 4;
      let len = 0;
      let mul = 1;
      let i = p + 1;
      let c: number;
      do {
        c = b[i++];
        len += (c & 0x7f) * mul;
        mul *= 128;
      } while (c & 0x80 && i < b.length);
      if (type === 1) s.write(CONNACK);
      else if (type === 8) s.write(Buffer.from([0x90, 0x03, b[i], b[i + 1], 0x01]));
      p = i + len;
    }
  });
});
server.listen(Number(process.argv[2]), '127.0.0.1');
process.on('SIGTERM', () => {
  for (const s of held) s.destroy();
  server.close(() => process.exit(0));
});
