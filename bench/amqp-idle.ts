/**
 * Memory of idle AMQP connections (`amqp-idle-memory` in `npm run bench`): N raw connections each go through the
 * handshake (protocol header, start-ok PLAIN guest/guest, tune-ok, open) and open one channel, then stay silent
 * (heartbeat 0, so the broker has no reason to close them). The broker's VmRSS (/proc/<pid>/status) is sampled
 * before and with all of them open; the difference over N is the cost of one idle connection.
 *
 * What Node's own socket costs (net.Socket, its libuv handle, the stream state) is measured the same way against a
 * bare Node.js server that only accepts and reads (`socketBaseline`), so that a broker's own share per connection
 * (its state, buffers, closures, registry entries) is the difference: issue 24's target is ≤ 2 KiB beyond the
 * socket.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { connect, type Socket } from 'node:net';
import { rssKiB } from './brokers.js';
import { HOST, mapLimit, sleep } from './util.js';

const require = createRequire(import.meta.url);
// amqplib's frame encoder (the reference client codec).
const defs = require('amqplib/lib/defs') as Record<string, number> & { encodeMethod(id: number, ch: number, fields: object): Buffer };

const HEADER = Buffer.from('AMQP\x00\x00\x09\x01', 'latin1');

export interface IdleOptions {
  connections: number;
  /** Handshakes in progress at once. */
  concurrency: number;
  /** Seconds waited with every connection open before the sample. */
  settleS: number;
}

export interface IdleResult {
  connections: number;
  beforeKiB: number;
  openKiB: number;
  /** (open - before) / connections. */
  perConnectionKiB: number;
  /** The same for a bare Node.js server holding as many sockets (null: not measured). */
  socketKiB: number | null;
  /** The broker's own figures before and with the connections open (FlowMQ: GET /api/v1/broker → process). */
  process: { before: Record<string, number>; open: Record<string, number> } | null;
}

/** The method (class, method id) of each complete method frame in `buf` from `at`; returns where parsing stopped. */
function methods(buf: Buffer, seen: Array<[number, number, number]>): number {
  let at = 0;
  while (buf.length - at >= 8) {
    const size = buf.readUInt32BE(at + 3);
    if (buf.length - at < size + 8) break;
    if (buf[at] === 1 && size >= 4) seen.push([buf.readUInt16BE(at + 1), buf.readUInt16BE(at + 7), buf.readUInt16BE(at + 9)]);
    at += size + 8;
  }
  return at;
}

/** One AMQP connection through connection.open-ok and channel 1's open-ok; then left open and silent. */
export function idleAmqpConnection(port: number, timeoutMs = 30_000): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: HOST, noDelay: true });
    let buf = Buffer.alloc(0);
    let step = 0;
    const fail = (e: Error) => {
      clearTimeout(timer);
      s.destroy();
      reject(e);
    };
    const timer = setTimeout(() => fail(new Error(`AMQP handshake timed out at step ${step}`)), timeoutMs);
    s.once('connect', () => s.write(HEADER));
    s.on('error', fail);
    s.once('close', () => fail(new Error(`closed during the AMQP handshake at step ${step}`)));
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const seen: Array<[number, number, number]> = [];
      buf = buf.subarray(methods(buf, seen));
      for (const [ch, cls, m] of seen) {
        if (cls === 10 && m === 10 && step === 0) {
          step = 1;
          s.write(defs.encodeMethod(defs.ConnectionStartOk, 0, { clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from('\0guest\0guest'), locale: 'en_US' }));
        } else if (cls === 10 && m === 30 && step === 1) {
          step = 2;
          s.write(
            Buffer.concat([
              defs.encodeMethod(defs.ConnectionTuneOk, 0, { channelMax: 16, frameMax: 131072, heartbeat: 0 }),
              defs.encodeMethod(defs.ConnectionOpen, 0, { virtualHost: '/', capabilities: '', insist: false }),
              defs.encodeMethod(defs.ChannelOpen, 1, { outOfBand: '' }),
            ]),
          );
        } else if (cls === 20 && m === 11 && ch === 1 && step === 2) {
          clearTimeout(timer);
          s.removeListener('data', onData);
          s.removeAllListeners('close');
          s.removeAllListeners('error');
          s.on('error', () => undefined);
          s.on('data', () => undefined);
          resolve(s);
        } else if (cls === 10 && m === 50) {
          fail(new Error('connection.close during the AMQP handshake'));
        }
      }
    };
    s.on('data', onData);
  });
}

function closeAll(sockets: Socket[]): Promise<void> {
  return Promise.all(
    sockets.map(
      (s) =>
        new Promise<void>((resolve) => {
          if (s.closed) return resolve();
          s.once('close', () => resolve());
          s.destroy();
        }),
    ),
  ).then(() => undefined);
}

/** Opens `o.connections` idle AMQP connections against a broker process and measures its RSS per connection. */
export async function measureIdleAmqp(pid: number, port: number, o: IdleOptions, memory?: () => Promise<Record<string, number>>, socketKiB: number | null = null): Promise<IdleResult> {
  await sleep(1000);
  const before = rssKiB(pid);
  const pBefore = memory ? await memory() : null;
  const sockets: Socket[] = [];
  try {
    await mapLimit(o.connections, o.concurrency, async () => {
      sockets.push(await idleAmqpConnection(port));
    });
    await sleep(o.settleS * 1000);
    const open = rssKiB(pid);
    const pOpen = memory ? await memory() : null;
    return {
      connections: sockets.length,
      beforeKiB: before,
      openKiB: open,
      perConnectionKiB: (open - before) / sockets.length,
      socketKiB,
      process: pBefore && pOpen ? { before: pBefore, open: pOpen } : null,
    };
  } finally {
    await closeAll(sockets);
  }
}

/**
 * What an accepted socket costs a bare Node.js server (this Node, the broker's V8 flags) that reads and discards:
 * RSS per connection over `connections` idle connections.
 */
export async function socketBaseline(connections: number, concurrency: number, settleS: number): Promise<number> {
  const server = `
    const net = require('node:net');
    const s = net.createServer((c) => { c.setNoDelay(true); c.on('data', () => {}); c.on('error', () => {}); });
    s.listen(0, '${HOST}', () => process.send(s.address().port));
  `;
  const child = spawn(process.execPath, ['--initial-old-space-size=128', '-e', server], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      child.once('message', (m) => resolve(m as number));
      child.once('exit', (c) => reject(new Error(`baseline server exited (${c})`)));
    });
    await sleep(500);
    const before = rssKiB(child.pid!);
    const sockets: Socket[] = [];
    try {
      await mapLimit(connections, concurrency, async () => {
        sockets.push(
          await new Promise<Socket>((resolve, reject) => {
            const s = connect({ port, host: HOST, noDelay: true }, () => {
              // The same bytes a client's protocol header takes, so that the server's socket has read once.
              s.write(HEADER);
              resolve(s);
            });
            s.once('error', reject);
          }),
        );
      });
      await sleep(settleS * 1000);
      return (rssKiB(child.pid!) - before) / sockets.length;
    } finally {
      await closeAll(sockets);
    }
  } finally {
    child.kill('SIGKILL');
  }
}

/** "N KiB per idle connection (socket: M KiB, beyond it: K KiB)". */
export function idleCell(r: IdleResult): string {
  const beyond = r.socketKiB === null ? '' : `; Node's socket ${r.socketKiB.toFixed(1)} KiB, beyond it ${(r.perConnectionKiB - r.socketKiB).toFixed(1)} KiB`;
  const heap = r.process ? `; heap +${((r.process.open.heapUsed! - r.process.before.heapUsed!) / 1024 / r.connections).toFixed(1)} KiB, buffers +${((r.process.open.arrayBuffers! - r.process.before.arrayBuffers!) / 1024 / r.connections).toFixed(1)} KiB per connection` : '';
  return `${r.perConnectionKiB.toFixed(1)} KiB RSS per idle connection (${r.connections} open: ${(r.beforeKiB / 1024).toFixed(0)} → ${(r.openKiB / 1024).toFixed(0)} MiB${beyond}${heap})`;
}
