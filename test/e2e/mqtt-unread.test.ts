/**
 * MQTT clients that send and never read, against the real bin/flowmq: a PINGREQ flood, a SUBSCRIBE flood, QoS 1
 * publishes (PUBACK each) and QoS 2 publishes with their PUBRELs (PUBREC and PUBCOMP each), 16 MiB each, as fast
 * as their sockets take it. Every reply queued for a client counts against its limit: once its unread replies fill
 * what the kernel holds and `maxPendingAcks` more, the broker stops reading it, so what the broker queues for it
 * and reads from it (GET /api/v1/clients bytesOut, bytesIn) and its RSS stay bounded whatever the client sends; a
 * normal client's marker goes through meanwhile; and a client whose replies make no progress for
 * --mqtt-packet-timeout (3 s here) is closed.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import mqtt from 'mqtt';
import { FlowmqProcess, eventually } from './harness.js';

const MiB = 1024 * 1024;
const SENT_EACH = 16 * MiB;
/**
 * What the broker may queue for one (its socket's bytesWritten): the kernel's send buffer (4 MiB on this loopback)
 * and at most `maxPendingAcks` (1000) replies more.
 */
const QUEUED_MAX = 6 * MiB;
/** What it may read from one: as many packets as it takes to queue that, 2 bytes in per byte out at worst (QoS 1). */
const READ_MAX = 10 * MiB;
/** RSS also counts the garbage of handling millions of packets, collected later: a loose bound. */
const RSS_GROWTH_MAX = 192 * MiB;

function rss(pid: number): number {
  return Number(/VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}

interface ClientView {
  remotePort: number | null;
  clientId: string | null;
  bytesIn: number;
  bytesOut: number;
}

/** CONNECT (3.1.1, clean session, keep-alive 0), CONNACK read, then the socket stops reading for good. */
async function stranger(port: number, clientId: string): Promise<Socket> {
  const s = await new Promise<Socket>((resolve, reject) => {
    const sock = connect(port, '127.0.0.1', () => resolve(sock));
    sock.once('error', reject);
  });
  s.on('error', () => undefined);
  const id = Buffer.from(clientId);
  const body = Buffer.concat([Buffer.from([0, 4]), Buffer.from('MQTT'), Buffer.from([4, 0x02, 0, 0, 0, id.length]), id]);
  s.write(Buffer.concat([Buffer.from([0x10, body.length]), body]));
  const connack = await new Promise<Buffer>((resolve) => s.once('data', resolve));
  assert.equal(connack[0], 0x20);
  s.pause();
  return s;
}

/** `unit` repeated to 64 KiB. */
function block(unit: number[]): Buffer {
  const one = Buffer.from(unit);
  return Buffer.concat(Array(Math.floor((64 * 1024) / one.length)).fill(one));
}

const FLOODS: Record<string, Buffer> = {
  // PINGREQ.
  ping: block([0xc0, 0x00]),
  // SUBSCRIBE packet id 1, filter "a", QoS 0.
  subscribe: block([0x82, 6, 0, 1, 0, 1, 0x61, 0]),
  // PUBLISH QoS 1, topic "x", packet id 1, payload "p".
  qos1: block([0x32, 6, 0, 1, 0x78, 0, 1, 0x70]),
  // PUBLISH QoS 2 (id 1) and its PUBREL.
  qos2: block([0x34, 6, 0, 1, 0x78, 0, 1, 0x70, 0x62, 2, 0, 1]),
};

/** Hands the socket `total` bytes of `chunk` at once (what it cannot send yet waits in this process). */
function flood(s: Socket, chunk: Buffer, total: number): void {
  const n = Math.ceil(total / chunk.length);
  s.write(Buffer.concat(Array(n).fill(chunk)));
}

describe('e2e: MQTT clients that never read their replies', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--protocols', 'mqtt', '--mqtt-packet-timeout', '3s'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  test('PINGREQ, SUBSCRIBE, QoS 1 and QoS 2 floods: bounded reads and memory, a marker goes through, all closed', async () => {
    const pid = broker.proc.pid!;
    const start = rss(pid);
    let peak = start;
    const names = Object.keys(FLOODS);
    const sockets = new Map<string, Socket>();
    for (const name of names) sockets.set(name, await stranger(broker.ports.mqtt, `unread-${name}`));
    const byPort = new Map([...sockets].map(([name, s]) => [s.localPort, name]));

    // The broker's own counters for them, followed while they last (they are closed 3 s after they stall).
    const read = new Map<string, number>();
    const queued = new Map<string, number>();
    let watching = true;
    const watch = (async () => {
      while (watching) {
        peak = Math.max(peak, rss(pid));
        const items = (await broker.api<{ items: ClientView[] }>('GET', '/api/v1/clients?protocol=mqtt&limit=1000').catch(() => ({ items: [] }))).items;
        for (const c of items) {
          const name = byPort.get(c.remotePort ?? -1);
          if (name === undefined) continue;
          read.set(name, Math.max(read.get(name) ?? 0, c.bytesIn));
          queued.set(name, Math.max(queued.get(name) ?? 0, c.bytesOut));
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();

    for (const n of names) flood(sockets.get(n)!, FLOODS[n], SENT_EACH);

    // A normal client meanwhile: a QoS 1 marker to its own subscription (its failure is reported with the figures).
    const began = Date.now();
    const marker = await (async () => {
      const normal = await mqtt.connectAsync(broker.mqttUrl, { clientId: 'unread-normal', reconnectPeriod: 0, connectTimeout: 10_000 });
      await normal.subscribeAsync('unread/marker', { qos: 1 });
      const got = new Promise<string>((resolve) => normal.on('message', (_t, payload) => resolve(String(payload))));
      await normal.publishAsync('unread/marker', 'marker', { qos: 1 });
      const text = await got;
      await normal.endAsync();
      return text;
    })().catch((err: Error) => `failed: ${err.message}`);
    const markerMs = Date.now() - began;

    // All four closed once their replies have made no progress for 3 s.
    const mib = (n: number) => `${(n / MiB).toFixed(1)} MiB`;
    const report = () =>
      names
        .map(
          (n) =>
            `${n}: sent ${mib(sockets.get(n)!.bytesWritten - sockets.get(n)!.writableLength)} of ${mib(SENT_EACH)}, broker read ${mib(read.get(n) ?? 0)}, queued ${mib(queued.get(n) ?? 0)}`,
        )
        .join('; ') + `; RSS peak +${mib(peak - start)}; normal client's marker: ${marker} after ${markerMs} ms`;
    let open: string[] = [];
    const closed = await eventually(
      async () => {
        const items = (await broker.api<{ items: ClientView[] }>('GET', '/api/v1/clients?protocol=mqtt&limit=1000')).items;
        open = items.filter((c) => byPort.has(c.remotePort ?? -1)).map((c) => byPort.get(c.remotePort!)!);
        return open.length === 0;
      },
      30_000,
      'the stuck connections to be closed',
    ).then(
      () => null,
      (err: Error) => err,
    );
    watching = false;
    await watch;
    peak = Math.max(peak, rss(pid));
    const figures = report();
    console.log(figures);
    assert.equal(marker, 'marker', figures);
    assert.equal(closed, null, `still open: ${open.join(', ')}; ${figures}`);
    for (const n of names) {
      assert.ok((queued.get(n) ?? 0) <= QUEUED_MAX, `${n}: the broker queued at most ${mib(QUEUED_MAX)}: ${figures}`);
      assert.ok((read.get(n) ?? 0) <= READ_MAX, `${n}: the broker read at most ${mib(READ_MAX)}: ${figures}`);
    }
    assert.ok(peak - start <= RSS_GROWTH_MAX, `RSS grew at most ${mib(RSS_GROWTH_MAX)}: ${figures}`);
    assert.ok(
      broker.logs.some((l) => l.msg === 'mqtt client does not read its replies, closing connection'),
      'the close is logged',
    );
    for (const s of sockets.values()) s.destroy();
  });
});
