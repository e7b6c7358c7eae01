/**
 * Micro-benchmark of the NATS codec alone (no sockets, one thread): `node dist/bench/nats-codec.js [--seconds S]`.
 * Not part of `npm run bench` (bench/nats.ts measures brokers); it tells how much of a core's time the codec
 * itself takes per message, against the broker-level target of ~1.25M msgs/s at 16-byte payloads.
 *
 * - parse PUB: a stream of `PUB bench.subject.x 16` messages cut into 64 KiB chunks (as socket reads arrive),
 *   through NatsServerParser to a handler that touches each payload.
 * - parse PUB borrowed: the same with `borrowed: true` (every payload copied, as with a shared read buffer).
 * - parse PUB (reply): the same with a reply subject (request traffic: the reply is decoded per message).
 * - parse HPUB: with a small header block.
 * - write MSG: NatsWriter.writeMsg of the same deliveries, taken every 64 KiB (a connection's batched write).
 * - parse MSG: NatsClientParser over the written stream (the load generator's consumer side).
 */
import { parseArgs } from 'node:util';
import {
  NatsClientParser,
  NatsServerParser,
  NatsWriter,
  type ConnectOptions,
  type NatsClientHandler,
  type NatsServerHandler,
} from '../src/protocols/nats/codec/index.js';

const { values } = parseArgs({ options: { seconds: { type: 'string', default: '1' }, payload: { type: 'string', default: '16' } } });
const seconds = Number(values.seconds);
const payloadSize = Number(values.payload);

class CountingServer implements NatsServerHandler {
  msgs = 0;
  bytes = 0;
  onConnect(_o: ConnectOptions): void {}
  onPub(_s: string, _r: string | null, p: Buffer): void {
    this.msgs++;
    this.bytes += p.length;
  }
  onHpub(_s: string, _r: string | null, h: Buffer, p: Buffer): void {
    this.msgs++;
    this.bytes += h.length + p.length;
  }
  onSub(): void {}
  onUnsub(): void {}
  onPing(): void {}
  onPong(): void {}
  onOk(): void {}
  onErr(): void {}
}

class CountingClient implements NatsClientHandler {
  msgs = 0;
  bytes = 0;
  onInfo(): void {}
  onMsg(_s: string, _sid: string, _r: string | null, p: Buffer): void {
    this.msgs++;
    this.bytes += p.length;
  }
  onHmsg(_s: string, _sid: string, _r: string | null, h: Buffer, p: Buffer): void {
    this.msgs++;
    this.bytes += h.length + p.length;
  }
  onOk(): void {}
  onErr(): void {}
  onPing(): void {}
  onPong(): void {}
}

/** `stream` cut into 64 KiB chunks, each a fresh copy as a socket read would be. */
function chunks(stream: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < stream.length; i += 65536) out.push(Buffer.from(stream.subarray(i, i + 65536)));
  return out;
}

const payload = Buffer.alloc(payloadSize, 0x78);
const PER_ROUND = 100_000;

function pubStream(kind: 'pub' | 'reply' | 'hpub'): Buffer {
  const w = new NatsWriter(1 << 20);
  const hdr = Buffer.from('NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n');
  for (let i = 0; i < PER_ROUND; i++) {
    if (kind === 'pub') w.writePub('bench.subject.x', null, payload);
    else if (kind === 'reply') w.writePub('bench.subject.x', `_INBOX.Zk3Ba8dDeWq0tE5yR.${i}`, payload);
    else w.writeHpub('bench.subject.x', null, hdr, payload);
  }
  return w.take()!;
}

/**
 * Runs `round` for about `seconds` of wall time and prints messages per second of CPU time (user + system of the
 * process): on a machine shared with other work, CPU time is a steadier measure than wall time.
 */
function rate(name: string, round: () => number): void {
  for (let i = 0; i < 5; i++) round(); // warm up
  let msgs = 0;
  const start = process.hrtime.bigint();
  const cpu0 = process.cpuUsage();
  const until = start + BigInt(Math.round(seconds * 1e9));
  let now = start;
  while (now < until) {
    msgs += round();
    now = process.hrtime.bigint();
  }
  const cpu = process.cpuUsage(cpu0);
  const s = (cpu.user + cpu.system) / 1e6;
  console.log(`${name.padEnd(22)} ${(msgs / s / 1e6).toFixed(2).padStart(6)} M msgs/s of CPU  (${((s / msgs) * 1e9).toFixed(0)} ns/msg)`);
}

console.log(`NATS codec, ${payloadSize}-byte payloads, ${seconds} s per figure (rates per CPU second), node ${process.version}`);
for (const [kind, borrowed] of [
  ['pub', false],
  ['pub', true],
  ['reply', false],
  ['hpub', false],
  ['hpub', true],
] as const) {
  const cs = chunks(pubStream(kind));
  const name = kind === 'pub' ? 'PUB' : kind === 'reply' ? 'PUB (reply)' : 'HPUB';
  rate(`parse ${name}${borrowed ? ' borrowed' : ''}`, () => {
    const p = new NatsServerParser({ maxControlLine: 4096, maxPayload: 1 << 20, borrowed });
    const h = new CountingServer();
    for (const c of cs) p.push(c, h);
    if (h.msgs !== PER_ROUND) throw new Error(`parsed ${h.msgs} of ${PER_ROUND}`);
    return h.msgs;
  });
}

const w = new NatsWriter();
// Taken batches are dropped, as a socket write would release them.
let sink = 0;
rate('write MSG', () => {
  for (let i = 0; i < PER_ROUND; i++) {
    w.writeMsg('bench.subject.x', '1', null, payload);
    if (w.length >= 65536) sink += w.take()!.length;
  }
  sink += w.take()?.length ?? 0;
  return PER_ROUND;
});
if (sink === 0) throw new Error('nothing written');
const written: Buffer[] = [];
for (let i = 0; i < PER_ROUND; i++) {
  w.writeMsg('bench.subject.x', '1', null, payload);
  if (w.length >= 65536) written.push(w.take()!);
}
written.push(w.take() ?? Buffer.alloc(0));
const msgStream = chunks(Buffer.concat(written));
rate('parse MSG', () => {
  const p = new NatsClientParser({ maxControlLine: 4096, maxPayload: 1 << 20 });
  const h = new CountingClient();
  for (const c of msgStream) p.push(c, h);
  if (h.msgs !== PER_ROUND) throw new Error(`parsed ${h.msgs} of ${PER_ROUND}`);
  return h.msgs;
});
