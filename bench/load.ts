/**
 * Load generators on raw sockets with pre-encoded frames, so the client is not the bottleneck: the
 * measurement is of the broker.
 */
import { connect, type Socket } from 'node:net';
import { encodeBatch } from '../src/core/index.js';

// ------------------------------------------------------------------ MQTT 3.1.1 frames

function remainingLength(n: number): Buffer {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return Buffer.from(out);
}

function str(s: string): Buffer {
  const b = Buffer.from(s);
  const l = Buffer.alloc(2);
  l.writeUInt16BE(b.length);
  return Buffer.concat([l, b]);
}

function packet(first: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([first]), remainingLength(body.length), body]);
}

export function mqttConnectFrame(clientId: string): Buffer {
  // protocol name, level 4, flags: clean session, keep alive 60 s
  return packet(0x10, Buffer.concat([str('MQTT'), Buffer.from([4, 0x02, 0, 60]), str(clientId)]));
}

export function mqttSubscribeFrame(filter: string, qos: number, id = 1): Buffer {
  const pid = Buffer.alloc(2);
  pid.writeUInt16BE(id);
  return packet(0x82, Buffer.concat([pid, str(filter), Buffer.from([qos])]));
}

export function mqttPublishFrame(topic: string, payload: Buffer, qos: 0 | 1, id = 1): Buffer {
  const parts = [str(topic)];
  if (qos > 0) {
    const pid = Buffer.alloc(2);
    pid.writeUInt16BE(id);
    parts.push(pid);
  }
  parts.push(payload);
  return packet(0x30 | (qos << 1), Buffer.concat(parts));
}

/**
 * Splits an MQTT byte stream into packets and counts them by type; keeps only the partial tail between
 * chunks.
 */
export class MqttCounter {
  private pending: Buffer = Buffer.alloc(0);
  readonly counts = new Map<number, number>();
  /** Packet ids of PUBLISH QoS 1 packets received, to acknowledge. */
  onPublishId: ((id: number) => void) | null = null;
  onPacket: ((type: number) => void) | null = null;

  push(chunk: Buffer): void {
    let buf = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    let pos = 0;
    for (;;) {
      if (buf.length - pos < 2) break;
      let len = 0;
      let mul = 1;
      let i = pos + 1;
      let ok = false;
      for (; i < buf.length && i < pos + 5; i++) {
        len += (buf[i] & 0x7f) * mul;
        mul *= 128;
        if ((buf[i] & 0x80) === 0) {
          ok = true;
          i++;
          break;
        }
      }
      if (!ok || buf.length - i < len) break;
      const type = buf[pos] >> 4;
      this.counts.set(type, (this.counts.get(type) ?? 0) + 1);
      if (type === 3 && ((buf[pos] >> 1) & 3) > 0 && this.onPublishId) {
        const tl = buf.readUInt16BE(i);
        this.onPublishId(buf.readUInt16BE(i + 2 + tl));
      }
      this.onPacket?.(type);
      pos = i + len;
    }
    this.pending = pos < buf.length ? Buffer.from(buf.subarray(pos)) : Buffer.alloc(0);
    buf = Buffer.alloc(0);
  }

  count(type: number): number {
    return this.counts.get(type) ?? 0;
  }
}

export function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.setNoDelay(true);
    s.once('error', reject);
  });
}

/** Connects an MQTT client and waits for CONNACK (and SUBACK when subscribing). */
export async function mqttClient(port: number, clientId: string, subscribe?: { filter: string; qos: number }): Promise<{ socket: Socket; counter: MqttCounter }> {
  const socket = await open(port);
  const counter = new MqttCounter();
  socket.on('data', (d: Buffer) => counter.push(d));
  socket.write(mqttConnectFrame(clientId));
  await until(() => counter.count(2) > 0, 5000, `CONNACK for ${clientId}`);
  if (subscribe) {
    socket.write(mqttSubscribeFrame(subscribe.filter, subscribe.qos));
    await until(() => counter.count(9) > 0, 5000, `SUBACK for ${clientId}`);
  }
  return { socket, counter };
}

export async function until(fn: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export interface MqttRunResult {
  sent: number;
  delivered: number;
  seconds: number;
  deliveredPerSec: number;
}

/**
 * QoS 0, `publishers` → 1 subscriber on `bench/#`. Publishers write blocks of pre-encoded PUBLISH frames as
 * fast as their sockets drain, for `seconds`; the subscriber counts what it receives.
 */
export async function mqttQos0Run(port: number, opts: { publishers: number; seconds: number; payloadBytes: number }): Promise<MqttRunResult> {
  const sub = await mqttClient(port, `bench-sub-${Date.now()}`, { filter: 'bench/#', qos: 0 });
  const pubs = await Promise.all(Array.from({ length: opts.publishers }, (_, i) => mqttClient(port, `bench-pub-${i}-${Date.now()}`)));
  const payload = Buffer.alloc(opts.payloadBytes, 0x61);
  const FRAMES_PER_BLOCK = 256;
  const blocks = pubs.map((_, i) => Buffer.concat(Array.from({ length: FRAMES_PER_BLOCK }, () => mqttPublishFrame(`bench/p${i}`, payload, 0))));
  let sent = 0;
  let running = true;
  const startDelivered = sub.counter.count(3);
  const start = process.hrtime.bigint();
  const pumps = pubs.map(
    (p, i) =>
      new Promise<void>((resolve) => {
        const pump = () => {
          while (running) {
            sent += FRAMES_PER_BLOCK;
            if (!p.socket.write(blocks[i])) {
              p.socket.once('drain', pump);
              return;
            }
          }
          resolve();
        };
        pump();
      }),
  );
  await new Promise((r) => setTimeout(r, opts.seconds * 1000));
  running = false;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const delivered = sub.counter.count(3) - startDelivered;
  for (const p of pubs) p.socket.emit('drain');
  await Promise.race([Promise.all(pumps), new Promise((r) => setTimeout(r, 1000))]);
  for (const c of [sub, ...pubs]) c.socket.destroy();
  return { sent, delivered, seconds, deliveredPerSec: delivered / seconds };
}

// ------------------------------------------------------------------ Kafka produce

function kstr(s: string): Buffer {
  return str(s);
}

/** ProduceRequest v3 (acks=-1) for one partition with one pre-encoded batch. */
export function kafkaProduceFrame(topic: string, partition: number, batch: Buffer, correlationId: number): Buffer {
  const header = Buffer.alloc(8);
  header.writeInt16BE(0, 0); // api key: Produce
  header.writeInt16BE(3, 2); // version 3
  header.writeInt32BE(correlationId, 4);
  const fixed = Buffer.alloc(2 + 2 + 4 + 4);
  fixed.writeInt16BE(-1, 0); // transactional id: null
  fixed.writeInt16BE(-1, 2); // acks = all
  fixed.writeInt32BE(30_000, 4); // timeout
  fixed.writeInt32BE(1, 8); // one topic
  const part = Buffer.alloc(4 + 4 + 4);
  part.writeInt32BE(1, 0); // one partition
  part.writeInt32BE(partition, 4);
  part.writeInt32BE(batch.length, 8);
  const body = Buffer.concat([header, kstr('bench'), fixed, kstr(topic), part, batch]);
  const size = Buffer.alloc(4);
  size.writeInt32BE(body.length);
  return Buffer.concat([size, body]);
}

export interface KafkaRunResult {
  requests: number;
  bytes: number;
  seconds: number;
  mbPerSec: number;
  recordsPerSec: number;
}

/**
 * Produce throughput: `connections` sockets, each keeping `inflight` ProduceRequests (acks=all) of
 * `recordsPerBatch` × `recordBytes` records outstanding, as librdkafka pipelines them.
 */
export async function kafkaProduceRun(
  port: number,
  opts: { topic: string; partitions: number; connections: number; inflight: number; recordsPerBatch: number; recordBytes: number; seconds: number },
): Promise<KafkaRunResult> {
  const value = Buffer.alloc(opts.recordBytes, 0x62);
  const now = Date.now();
  const records = Array.from({ length: opts.recordsPerBatch }, () => ({ key: null, value, headers: [], timestamp: now }));
  let acked = 0;
  let running = true;
  const start = process.hrtime.bigint();
  const conns = await Promise.all(
    Array.from({ length: opts.connections }, async (_, c) => {
      const socket = await open(port);
      let corr = 0;
      let outstanding = 0;
      let pending: Buffer = Buffer.alloc(0);
      const partition = c % opts.partitions;
      const frame = () => kafkaProduceFrame(opts.topic, partition, encodeBatch(records), corr++);
      const template = frame();
      const send = () => {
        while (running && outstanding < opts.inflight) {
          const f = Buffer.from(template);
          f.writeInt32BE(corr++, 8);
          outstanding++;
          socket.write(f);
        }
      };
      socket.on('data', (d: Buffer) => {
        pending = pending.length ? Buffer.concat([pending, d]) : d;
        while (pending.length >= 4 && pending.length >= 4 + pending.readInt32BE(0)) {
          const len = pending.readInt32BE(0);
          // v3 response: correlation id, then [topics [partition, error_code, ...]]; check the error code.
          const err = pending.readInt16BE(4 + 4 + 4 + 2 + opts.topic.length + 4 + 4);
          if (err !== 0) throw new Error(`produce failed with Kafka error ${err}`);
          pending = pending.subarray(4 + len);
          outstanding--;
          acked++;
        }
        send();
      });
      return { socket, send, outstanding: () => outstanding };
    }),
  );
  for (const c of conns) c.send();
  await new Promise((r) => setTimeout(r, opts.seconds * 1000));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const done = acked;
  running = false;
  for (const c of conns) c.socket.destroy();
  const bytes = done * opts.recordsPerBatch * opts.recordBytes;
  return { requests: done, bytes, seconds, mbPerSec: bytes / seconds / 1e6, recordsPerSec: (done * opts.recordsPerBatch) / seconds };
}
