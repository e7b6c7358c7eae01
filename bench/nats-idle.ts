/**
 * Idle NATS connections: the broker's resident memory per connection that has said CONNECT, had a PING answered
 * and holds one subscription (what a quiet service's connection looks like), measured the same way against
 * FlowMQ and nats-server (the `nats-idle` scenario of `npm run bench -- nats`, or on its own:
 * `node dist/bench/nats-idle.js [connections]`, which starts both brokers itself).
 *
 * VmRSS of the broker before the connections are opened and 2 s after the last one is set up, divided by the
 * count. Each connection: INFO read, `CONNECT` (as nats.js sends it) + `PING`, its PONG, then `SUB idle.<i> 1` +
 * `PING` and that PONG (so the SUB has been served). No payload moves.
 */
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { cleanupAll, rssKiB, startFlowmq } from './brokers.js';
import { connectFrame } from './nats.js';
import { natsServerBinary, startNatsServer, waitNatsInfo } from './nats-server.js';
import { freePort, open, sleep } from './util.js';

export interface NatsIdleResult {
  connections: number;
  rssBeforeKiB: number;
  rssAfterKiB: number;
  kibPerConnection: number;
  connectSeconds: number;
}

/** Reads until `want` (e.g. `PONG\r\n`) has been seen `times` times since the call; rejects on close or timeout. */
function waitFor(s: Socket, want: string, timeoutMs = 30_000): Promise<void> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const done = (err?: Error) => {
      clearTimeout(t);
      s.off('data', onData);
      s.off('close', onClose);
      if (err) reject(err);
      else resolve();
    };
    const onData = (d: Buffer) => {
      buf += d.toString('latin1');
      if (buf.includes(want)) done();
      else if (buf.length > 64 * 1024) buf = buf.slice(-want.length);
    };
    const onClose = () => done(new Error(`closed before ${JSON.stringify(want)}`));
    const t = setTimeout(() => done(new Error(`no ${JSON.stringify(want)} within ${timeoutMs} ms`)), timeoutMs);
    s.on('data', onData);
    s.on('close', onClose);
  });
}

/** One idle connection: CONNECT, PING/PONG, one SUB confirmed by a second PING/PONG. */
async function idleConnection(port: number, i: number): Promise<Socket> {
  const s = await open(port);
  s.on('error', () => undefined);
  try {
    await waitFor(s, '\r\n'); // INFO
    const pong = waitFor(s, 'PONG\r\n');
    s.write(Buffer.concat([connectFrame(`idle-${i}`), Buffer.from('PING\r\n')]));
    await pong;
    const pong2 = waitFor(s, 'PONG\r\n');
    s.write(`SUB idle.${i} 1\r\nPING\r\n`);
    await pong2;
  } catch (e) {
    s.destroy();
    throw e;
  }
  return s;
}

/** Opens `n` idle connections (at most `concurrency` being set up at once) to the broker `pid` on `port`. */
export async function runNatsIdle(port: number, pid: number, n: number, concurrency = 100): Promise<NatsIdleResult> {
  await sleep(1000);
  const before = rssKiB(pid);
  const t0 = Date.now();
  const socks: Socket[] = [];
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: Math.min(concurrency, n) }, async () => {
        while (next < n) socks.push(await idleConnection(port, next++));
      }),
    );
    const connectSeconds = (Date.now() - t0) / 1000;
    await sleep(2000);
    const after = rssKiB(pid);
    return { connections: n, rssBeforeKiB: before, rssAfterKiB: after, kibPerConnection: (after - before) / n, connectSeconds };
  } finally {
    for (const s of socks) s.destroy();
    await sleep(300);
  }
}

export const natsIdleCell = (r: NatsIdleResult): string =>
  `${r.kibPerConnection.toFixed(1)} KiB/conn (RSS ${(r.rssBeforeKiB / 1024).toFixed(0)} → ${(r.rssAfterKiB / 1024).toFixed(0)} MiB, ${r.connections} connections set up in ${r.connectSeconds.toFixed(1)} s)`;

async function main(): Promise<void> {
  const n = Number(process.argv[2] ?? 2000);
  const rounds = Number(process.argv[3] ?? 1);
  for (let r = 0; r < rounds; r++) {
    const port = await freePort();
    const f = await startFlowmq(['--protocols', 'mqtt,kafka,nats', '--nats-port', String(port)]);
    try {
      await waitNatsInfo(port, 30_000, () => true);
      console.log(`flowmq:      ${natsIdleCell(await runNatsIdle(port, f.pid, n))}`);
    } finally {
      await f.stop();
    }
    const bin = natsServerBinary();
    if (bin === null) console.log('nats-server: not installed');
    else {
      const ns = await startNatsServer(bin);
      try {
        console.log(`nats-server: ${natsIdleCell(await runNatsIdle(ns.port, ns.pid, n))}`);
      } finally {
        await ns.stop();
      }
    }
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main()
    .catch((e) => {
      console.error(e);
      process.exitCode = 1;
    })
    .finally(() => cleanupAll());
}
