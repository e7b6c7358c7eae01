/**
 * Kafka load generator on raw sockets. Requests are encoded by hand here (Produce v3, Fetch v4) so the broker
 * is measured as a black box; only the RecordBatch encoder is shared with the broker (src/core/record-batch).
 *
 * - Produce throughput: pre-encoded ~1 MB batches of 1 KiB records, one partition per request and up to
 *   `inflight` requests outstanding per connection, as librdkafka sends them under load; acks=all.
 * - Latency: open-loop paced produce at a fixed rate (a batch per partition every `lingerMs`, as a producer with
 *   linger.ms does), while a consumer connection long-polls Fetch v4. Produce-ack latency runs from the moment a
 *   batch is created (so it includes any wait for a free in-flight slot) to its response; end-to-end latency from
 *   the same moment to the Fetch response that carries the batch.
 */
import type { Socket } from 'node:net';
import { crc32c, crc32cCombine } from '../src/core/crc32c.js';
import { BATCH_HEADER_SIZE, encodeBatch, OFF_ATTRIBUTES, OFF_BASE_TS, OFF_CRC, OFF_MAX_TS, type RecordInput } from '../src/core/record-batch.js';
import { Worker } from 'node:worker_threads';
import { nowS, open, percentiles, sleep, type Percentiles } from './util.js';

const CLIENT_ID = 'flowmq-bench';

export function kstr(s: string): Buffer {
  const b = Buffer.from(s);
  const out = Buffer.alloc(2 + b.length);
  out.writeInt16BE(b.length, 0);
  b.copy(out, 2);
  return out;
}

/** size prefix + request header v1 (api key, version, correlation id, client id) + body parts. */
export function frame(apiKey: number, version: number, correlationId: number, parts: Buffer[], trailingBytes = 0): Buffer {
  const head = Buffer.alloc(8);
  head.writeInt16BE(apiKey, 0);
  head.writeInt16BE(version, 2);
  head.writeInt32BE(correlationId, 4);
  const body = Buffer.concat([head, kstr(CLIENT_ID), ...parts]);
  const size = Buffer.alloc(4);
  size.writeInt32BE(body.length + trailingBytes);
  return Buffer.concat([size, body]);
}

/**
 * The head of a ProduceRequest v3 (acks=-1) for one partition, up to and including the records length; the
 * batch itself follows it on the wire, so one pre-encoded batch serves every request.
 */
export function produceHead(topic: string, partition: number, batchBytes: number, correlationId: number): Buffer {
  const fixed = Buffer.alloc(2 + 2 + 4 + 4);
  fixed.writeInt16BE(-1, 0); // transactional id: null
  fixed.writeInt16BE(-1, 2); // acks = all
  fixed.writeInt32BE(30_000, 4); // timeout ms
  fixed.writeInt32BE(1, 8); // one topic
  const part = Buffer.alloc(12);
  part.writeInt32BE(1, 0); // one partition
  part.writeInt32BE(partition, 4);
  part.writeInt32BE(batchBytes, 8);
  return frame(0, 3, correlationId, [fixed, kstr(topic), part], batchBytes);
}

/**
 * FetchRequest v4: read-uncommitted long poll over `offsets.length` partitions of `topic`: partitions 0, 1, ...,
 * or those named by `partitionIds` (same length as `offsets`).
 */
export function fetchRequest(
  topic: string,
  offsets: number[],
  correlationId: number,
  o: { maxWaitMs: number; minBytes: number; maxBytes: number; partitionMaxBytes: number },
  partitionIds?: number[],
): Buffer {
  const fixed = Buffer.alloc(4 + 4 + 4 + 4 + 1 + 4);
  fixed.writeInt32BE(-1, 0); // replica id: a consumer
  fixed.writeInt32BE(o.maxWaitMs, 4);
  fixed.writeInt32BE(o.minBytes, 8);
  fixed.writeInt32BE(o.maxBytes, 12);
  fixed.writeInt8(0, 16); // isolation: read uncommitted
  fixed.writeInt32BE(1, 17); // one topic
  const parts = Buffer.alloc(4 + 16 * offsets.length);
  parts.writeInt32BE(offsets.length, 0);
  offsets.forEach((off, p) => {
    parts.writeInt32BE(partitionIds?.[p] ?? p, 4 + 16 * p);
    parts.writeBigInt64BE(BigInt(off), 8 + 16 * p);
    parts.writeInt32BE(o.partitionMaxBytes, 16 + 16 * p);
  });
  return frame(1, 4, correlationId, [fixed, kstr(topic), parts]);
}

/** Cursor over a response body. */
class Reader {
  constructor(
    readonly buf: Buffer,
    public pos = 0,
  ) {}
  i8(): number {
    return this.buf.readInt8(this.pos++);
  }
  i16(): number {
    const v = this.buf.readInt16BE(this.pos);
    this.pos += 2;
    return v;
  }
  i32(): number {
    const v = this.buf.readInt32BE(this.pos);
    this.pos += 4;
    return v;
  }
  i64(): number {
    const v = Number(this.buf.readBigInt64BE(this.pos));
    this.pos += 8;
    return v;
  }
  string(): string {
    const n = this.i16();
    if (n < 0) return '';
    const s = this.buf.toString('utf8', this.pos, this.pos + n);
    this.pos += n;
    return s;
  }
}

/** ProduceResponse v3 for one partition: its error code (body after the correlation id). */
export function produceError(body: Buffer): number {
  const r = new Reader(body);
  r.i32(); // topics
  r.string();
  r.i32(); // partitions
  r.i32(); // index
  return r.i16();
}

export interface FetchedBatch {
  partition: number;
  baseOffset: number;
  records: number;
  /** Next offset to fetch after this batch. */
  nextOffset: number;
  /** First 8 bytes of the first record's value as a float64 (the bench's send time). */
  stamp: number;
}

/** Zig-zag varint at r.pos. */
function varint(r: Reader): number {
  let z = 0;
  let mul = 1;
  for (let i = 0; i < 10; i++) {
    const b = r.buf[r.pos++];
    z += (b & 0x7f) * mul;
    if ((b & 0x80) === 0) return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
    mul *= 128;
  }
  throw new Error('varint too long');
}

/**
 * FetchResponse v4 (body after the correlation id): the complete batches per partition (a partial batch at the
 * end of a partition's records, cut by max bytes, is skipped as consumers do) and the partitions' error codes.
 */
export function parseFetch(body: Buffer): { batches: FetchedBatch[]; errors: { partition: number; code: number }[] } {
  const r = new Reader(body);
  const batches: FetchedBatch[] = [];
  const errors: { partition: number; code: number }[] = [];
  r.i32(); // throttle time
  const topics = r.i32();
  for (let t = 0; t < topics; t++) {
    r.string();
    const parts = r.i32();
    for (let p = 0; p < parts; p++) {
      const partition = r.i32();
      const code = r.i16();
      r.i64(); // high watermark
      r.i64(); // last stable offset
      const aborted = r.i32();
      if (aborted > 0) r.pos += 16 * aborted;
      const size = r.i32();
      if (code !== 0) errors.push({ partition, code });
      if (size <= 0) continue;
      const end = r.pos + size;
      let pos = r.pos;
      while (pos + 61 <= end) {
        const batchSize = 12 + body.readInt32BE(pos + 8);
        if (pos + batchSize > end) break;
        const baseOffset = Number(body.readBigInt64BE(pos));
        const lastOffsetDelta = body.readInt32BE(pos + 23);
        const records = body.readInt32BE(pos + 57);
        // First record: length, attributes, timestamp delta, offset delta, key, value.
        const rr = new Reader(body, pos + 61);
        varint(rr);
        rr.pos++;
        varint(rr);
        varint(rr);
        const keyLen = varint(rr);
        if (keyLen > 0) rr.pos += keyLen;
        const valueLen = varint(rr);
        const stamp = valueLen >= 8 ? body.readDoubleBE(rr.pos) : NaN;
        batches.push({ partition, baseOffset, records, nextOffset: baseOffset + lastOffsetDelta + 1, stamp });
        pos += batchSize;
      }
      r.pos = end;
    }
  }
  return { batches, errors };
}

/** A Kafka connection: size-prefixed response frames matched to requests by correlation id (in order). */
export class KafkaConn {
  private chunks: Buffer[] = [];
  private have = 0;
  private need = -1;
  private corr = 1;
  private readonly waiting = new Map<number, (body: Buffer, at: number) => void>();
  closed = false;
  error: Error | null = null;

  constructor(readonly socket: Socket) {
    socket.on('data', (d: Buffer) => this.push(d));
    socket.on('error', (e) => (this.error = e));
    socket.on('close', () => {
      this.closed = true;
      if (this.waiting.size > 0 && !this.error) this.error = new Error(`connection closed with ${this.waiting.size} requests outstanding`);
    });
  }

  static async open(port: number): Promise<KafkaConn> {
    return new KafkaConn(await open(port));
  }

  get outstanding(): number {
    return this.waiting.size;
  }

  nextCorrelationId(): number {
    const c = this.corr;
    this.corr = this.corr === 0x7fffffff ? 1 : this.corr + 1;
    return c;
  }

  /** Writes the request parts (the first carrying correlation id `corr`); `done` gets the response body. */
  send(corr: number, parts: Buffer[], done: (body: Buffer, at: number) => void): void {
    this.waiting.set(corr, done);
    if (parts.length > 1) this.socket.cork();
    for (const p of parts) this.socket.write(p);
    if (parts.length > 1) this.socket.uncork();
  }

  private push(d: Buffer): void {
    this.chunks.push(d);
    this.have += d.length;
    for (;;) {
      if (this.need < 0) {
        if (this.have < 4) return;
        if (this.chunks[0].length < 4) this.chunks = [Buffer.concat(this.chunks, this.have)];
        this.need = 4 + this.chunks[0].readInt32BE(0);
      }
      if (this.have < this.need) return;
      const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.have);
      const body = all.subarray(8, this.need);
      const corr = all.readInt32BE(4);
      const rest = all.subarray(this.need);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.have = rest.length;
      this.need = -1;
      const done = this.waiting.get(corr);
      if (!done) {
        this.error = new Error(`response with unknown correlation id ${corr}`);
        this.socket.destroy();
        return;
      }
      this.waiting.delete(corr);
      done(body, nowS());
    }
  }

  close(): void {
    this.socket.destroy();
  }
}

function recordsOf(count: number, recordBytes: number, timestamp: number, first?: Buffer): RecordInput[] {
  const value = Buffer.alloc(recordBytes, 0x62);
  return Array.from({ length: count }, (_, i) => ({ key: null, value: i === 0 && first ? first : value, headers: [], timestamp }));
}

/**
 * Batches of `n` records of `recordBytes`, all stamped with one creation instant, as two parts that go on the wire
 * back to back: a head of a few dozen bytes made for each batch (the batch header with its timestamps and CRC, and
 * the start of the first record, up to and including its float64 stamp), and the rest of the batch, the same for
 * every batch of `n` records and shared by all of them. The CRC is the head's combined with the rest's, computed
 * once. What goes on the wire is the same as from encodeBatch; the generator just does not spend its share of the
 * machine's two cores copying and checksumming every byte again (librdkafka does that in C, in threads of its own),
 * which delayed its event loop and was measured as broker latency.
 */
export class BatchFactory {
  private readonly templates = new Map<number, { head: Buffer; rest: Buffer; restCrc: number; stampAt: number }>();
  constructor(private readonly recordBytes: number) {}

  /** The batch's parts: a new head, then the shared rest. */
  make(n: number, stamp: number, timestampMs: number): [Buffer, Buffer] {
    let t = this.templates.get(n);
    if (t === undefined) {
      const marker = Buffer.from('FMQSTAMP'); // 8 bytes, where the float64 stamp goes
      const first = Buffer.alloc(this.recordBytes, 0x62);
      marker.copy(first, 0);
      const batch = encodeBatch(recordsOf(n, this.recordBytes, 0, first));
      const stampAt = batch.indexOf(marker, BATCH_HEADER_SIZE);
      if (stampAt < 0) throw new Error('batch template: first record value not found');
      const rest = batch.subarray(stampAt + 8);
      t = { head: batch.subarray(0, stampAt + 8), rest, restCrc: crc32c(rest), stampAt };
      // A few dozen sizes recur at a steady rate; an odd one after a stall is dropped again.
      if (this.templates.size >= 64) this.templates.delete(this.templates.keys().next().value as number);
      this.templates.set(n, t);
    }
    const head = Buffer.from(t.head);
    head.writeDoubleBE(stamp, t.stampAt);
    head.writeBigInt64BE(BigInt(timestampMs), OFF_BASE_TS);
    head.writeBigInt64BE(BigInt(timestampMs), OFF_MAX_TS);
    head.writeUInt32BE(crc32cCombine(crc32c(head, OFF_ATTRIBUTES), t.restCrc, t.rest.length), OFF_CRC);
    return [head, t.rest];
  }
}

// ------------------------------------------------------------------ produce throughput

export interface ProduceOptions {
  topic: string;
  partitions: number;
  connections: number;
  inflight: number;
  recordsPerBatch: number;
  recordBytes: number;
  warmupS: number;
  seconds: number;
}

export interface ProduceResult {
  /** Record value bytes acknowledged per second (1 MB = 10^6 bytes). */
  mbPerSec: number;
  recordsPerSec: number;
  requestsPerSec: number;
  batchBytes: number;
  seconds: number;
  ack: Percentiles;
  errors: number;
}

export async function kafkaProduceThroughput(port: number, o: ProduceOptions): Promise<ProduceResult> {
  const batch = encodeBatch(recordsOf(o.recordsPerBatch, o.recordBytes, Date.now()));
  const conns = await Promise.all(Array.from({ length: o.connections }, () => KafkaConn.open(port)));
  let running = true;
  let measuring = false;
  let acked = 0;
  let errors = 0;
  const ackSamples: number[] = [];
  try {
    const pumps = conns.map((conn, c) => {
      let k = 0;
      const pump = () => {
        while (running && !conn.closed && conn.outstanding < o.inflight) {
          const partition = (c + o.connections * k++) % o.partitions;
          const corr = conn.nextCorrelationId();
          const sentAt = nowS();
          conn.send(corr, [produceHead(o.topic, partition, batch.length, corr), batch], (body, at) => {
            if (produceError(body) !== 0) errors++;
            else if (measuring) {
              acked++;
              ackSamples.push((at - sentAt) * 1000);
            }
            pump();
          });
        }
      };
      return pump;
    });
    for (const p of pumps) p();
    await sleep(o.warmupS * 1000);
    measuring = true;
    const t0 = nowS();
    await sleep(o.seconds * 1000);
    measuring = false;
    const seconds = nowS() - t0;
    running = false;
    await waitIdle(conns, 15_000);
    const broken = conns.find((c) => c.error);
    if (broken) throw broken.error;
    return {
      mbPerSec: (acked * o.recordsPerBatch * o.recordBytes) / seconds / 1e6,
      recordsPerSec: (acked * o.recordsPerBatch) / seconds,
      requestsPerSec: acked / seconds,
      batchBytes: batch.length,
      seconds,
      ack: percentiles(ackSamples),
      errors,
    };
  } finally {
    running = false;
    for (const c of conns) c.close();
  }
}

async function waitIdle(conns: KafkaConn[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (conns.some((c) => c.outstanding > 0 && !c.closed) && Date.now() < deadline) await sleep(10);
}

// ------------------------------------------------------------------ latency at a fixed rate

export interface LatencyOptions {
  topic: string;
  partitions: number;
  connections: number;
  inflight: number;
  recordBytes: number;
  /** Record value bytes per second to produce. */
  bytesPerSec: number;
  lingerMs: number;
  /**
   * Minimum warm-up; it goes on (up to SETTLE_LIMIT_S more) until the producers have kept up for SETTLE_S: no batch
   * waited for an in-flight slot. A fresh broker's first requests are slow and leave a backlog, and the measurement
   * is of the steady state at this rate, not of how fast that backlog clears.
   */
  warmupS: number;
  seconds: number;
  /** Run a consumer reading everything as it is produced (for the end-to-end latency). */
  consume: boolean;
}

export interface LatencyResult {
  /** Record value bytes acknowledged per second in the measured interval. */
  achievedMbPerSec: number;
  targetMbPerSec: number;
  /** Mean records per batch made in the measured interval. */
  recordsPerBatch: number;
  /** Produce request created → its response (ms): what the producing application sees. */
  produceAck: Percentiles;
  /** Produce request written to the socket → its response (ms): the broker's part of it. */
  produceAckFromWrite: Percentiles;
  /** Produce request created → the Fetch response carrying the batch arrives (ms). */
  endToEnd: Percentiles;
  produced: number;
  consumed: number;
  /** Batches (sent as one request each) made or grown in the measured interval that waited for a free in-flight slot. */
  queuedBatches: number;
  /** How long the warm-up lasted (s). */
  warmupS: number;
  errors: number;
}

/** The latency warm-up ends once no batch has waited for an in-flight slot for this long (s)... */
const SETTLE_S = 0.5;
/** ...or this long after its minimum (s), settled or not. */
const SETTLE_LIMIT_S = 10;

export async function kafkaLatency(port: number, o: LatencyOptions): Promise<LatencyResult> {
  const P = o.partitions;
  const recordsPerSec = o.bytesPerSec / o.recordBytes;
  const producers = await Promise.all(Array.from({ length: o.connections }, () => KafkaConn.open(port)));
  const factory = new BatchFactory(o.recordBytes);
  let running = true;
  let windowStart = Infinity;
  let windowEnd = Infinity;
  let created = 0;
  let produced = 0;
  let ackedInWindow = 0;
  let queuedBatches = 0;
  let lastQueuedAt = -Infinity;
  let warmupTookS = 0;
  let batchesInWindow = 0;
  let recordsInWindow = 0;
  let errors = 0;
  const ackSamples: number[] = [];
  const writeAckSamples: number[] = [];
  const inWindow = (t: number) => t >= windowStart && t < windowEnd;
  const queues: { partition: number; batch: [Buffer, Buffer]; records: number; createdAt: number; touchedAt: number; waited: boolean }[][] = producers.map(
    () => [],
  );
  // A producer's batch.size (1 MiB): a batch still waiting for an in-flight slot takes new records up to it.
  const maxBatchRecords = Math.max(1, Math.floor((1 << 20) / o.recordBytes));

  const drain = (c: number) => {
    const conn = producers[c];
    const q = queues[c];
    while (q.length > 0 && conn.outstanding < o.inflight && !conn.closed) {
      const item = q.shift()!;
      const corr = conn.nextCorrelationId();
      const writtenAt = nowS();
      const bytes = item.batch[0].length + item.batch[1].length;
      conn.send(corr, [produceHead(o.topic, item.partition, bytes, corr), ...item.batch], (body, at) => {
        if (produceError(body) !== 0) errors++;
        else {
          produced += item.records;
          if (inWindow(item.createdAt)) {
            ackSamples.push((at - item.createdAt) * 1000);
            writeAckSamples.push((at - writtenAt) * 1000);
            ackedInWindow += item.records;
          }
        }
        drain(c);
      });
    }
  };

  // Producer: on a grid of linger intervals (as a client's linger timer releases batches, not a linger after the
  // previous tick ended, which the event loop's lag stretched to ~8 ms and the batches to ~1 MB), create the records
  // due up to the last grid point, one batch per partition, stamped with their creation time (batch base timestamp
  // in ms, and the first record's value carries the same instant as a float64 for sub-millisecond resolution).
  // Counting to the grid point rather than to the moment the tick runs keeps the batches the same size, so the
  // generator rarely builds a new batch template.
  const t0 = nowS();
  const lingerS = o.lingerMs / 1000;
  let nextPartition = 0;
  const tick = () => {
    if (!running) return;
    const now = nowS();
    const k = Math.floor((now - t0) / lingerS);
    const due = Math.floor(k * lingerS * recordsPerSec) - created;
    if (due > 0) {
      created += due;
      const per = Math.floor(due / P);
      let extra = due % P;
      for (let i = 0; i < P; i++) {
        const partition = (nextPartition + i) % P;
        const n = per + (extra > 0 ? 1 : 0);
        if (extra > 0) extra--;
        if (n === 0) continue;
        const c = partition % producers.length;
        // As a Kafka producer's accumulator does, records for a partition whose batch has not gone out yet (all
        // in-flight slots taken) join that batch rather than queue up behind it as one more request. The batch
        // keeps its creation time, so its latency counts from its oldest records.
        const waiting = queues[c].find((q) => q.partition === partition && q.records + n <= maxBatchRecords);
        if (inWindow(now)) {
          if (waiting === undefined) batchesInWindow++;
          recordsInWindow += n;
        }
        if (waiting !== undefined) {
          waiting.records += n;
          waiting.batch = factory.make(waiting.records, waiting.createdAt, Date.now());
          waiting.touchedAt = now;
        } else {
          queues[c].push({ partition, batch: factory.make(n, now, Date.now()), records: n, createdAt: now, touchedAt: now, waited: false });
        }
      }
      nextPartition = (nextPartition + (due % P)) % P;
      for (let c = 0; c < producers.length; c++) {
        drain(c);
        // What the tick could not send waits for an in-flight slot.
        for (const item of queues[c]) {
          if (item.touchedAt !== now) continue;
          lastQueuedAt = now;
          if (inWindow(now) && !item.waited) queuedBatches++;
          item.waited = true;
        }
      }
    }
    setTimeout(tick, Math.max(0, (t0 + (k + 1) * lingerS - nowS()) * 1000));
  };

  // Consumer: a client of its own, in a worker thread (as a consuming application would be another process): on a
  // two-core machine one event loop producing and consuming at hundreds of MB/s was itself the bottleneck, and its
  // delays were measured as the broker's latency.
  const consumer = o.consume
    ? new Worker(new URL('./kafka-consumer.js', import.meta.url), {
        workerData: { port, topic: o.topic, partitions: P } satisfies ConsumerWorkerData,
      })
    : null;
  const consumerDone = new Promise<ConsumerWorkerResult>((resolve, reject) => {
    if (consumer === null) return;
    consumer.once('message', (m: ConsumerWorkerResult) => resolve(m));
    consumer.once('error', reject);
    consumer.once('exit', (code) => reject(new Error(`consumer worker exited with code ${code}`)));
  });

  try {
    tick();
    await sleep(o.warmupS * 1000);
    const settleBy = nowS() + SETTLE_LIMIT_S;
    while (nowS() < settleBy && (nowS() - lastQueuedAt < SETTLE_S || queues.some((q) => q.length > 0))) await sleep(50);
    warmupTookS = nowS() - t0;
    windowStart = nowS();
    await sleep(o.seconds * 1000);
    windowEnd = nowS();
    running = false;
    // Let everything created in the window be acknowledged and consumed.
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline && (queues.some((q) => q.length > 0) || producers.some((c) => c.outstanding > 0 && !c.closed))) await sleep(10);
    const broken = producers.find((c) => c.error);
    if (broken) throw broken.error;
    const none: ConsumerWorkerResult = { consumed: produced, errors: 0, stamps: [], latenciesMs: [], error: null };
    consumer?.postMessage({ produced, deadline } satisfies ConsumerWorkerStop);
    const got = consumer === null ? none : await consumerDone;
    if (got.error !== null) throw new Error(`consumer: ${got.error}`);
    const consumed = got.consumed;
    errors += got.errors;
    const e2eSamples: number[] = [];
    for (let i = 0; i < got.stamps.length; i++) if (inWindow(got.stamps[i])) e2eSamples.push(got.latenciesMs[i]);
    return {
      achievedMbPerSec: (ackedInWindow * o.recordBytes) / (windowEnd - windowStart) / 1e6,
      targetMbPerSec: o.bytesPerSec / 1e6,
      recordsPerBatch: batchesInWindow > 0 ? recordsInWindow / batchesInWindow : 0,
      produceAck: percentiles(ackSamples),
      produceAckFromWrite: percentiles(writeAckSamples),
      endToEnd: percentiles(e2eSamples),
      produced,
      consumed,
      queuedBatches,
      warmupS: warmupTookS,
      errors,
    };
  } finally {
    running = false;
    for (const c of producers) c.close();
    await consumer?.terminate();
  }
}

/** What the latency benchmark's consumer worker (kafka-consumer.ts) is given, is told at the end, and answers. */
export interface ConsumerWorkerData {
  port: number;
  topic: string;
  partitions: number;
}
export interface ConsumerWorkerStop {
  /** Records acknowledged to the producers: the worker stops once it has consumed as many, or at `deadline`. */
  produced: number;
  /** Date.now() value. */
  deadline: number;
}
export interface ConsumerWorkerResult {
  consumed: number;
  errors: number;
  /** Per fetched batch: its creation time (nowS) and the time from then until its fetch response arrived. */
  stamps: number[];
  latenciesMs: number[];
  error: string | null;
}

/** The consumer of the latency benchmark: long-polls Fetch v4 over all partitions from offset 0 (the stream is fresh). */
export async function consumeForLatency(d: ConsumerWorkerData, stopped: Promise<ConsumerWorkerStop>): Promise<ConsumerWorkerResult> {
  const out: ConsumerWorkerResult = { consumed: 0, errors: 0, stamps: [], latenciesMs: [], error: null };
  const consumer = await KafkaConn.open(d.port);
  const offsets = new Array<number>(d.partitions).fill(0);
  const fetchOpts = { maxWaitMs: 500, minBytes: 1, maxBytes: 64 << 20, partitionMaxBytes: 16 << 20 };
  let stop: ConsumerWorkerStop | null = null;
  void stopped.then((s) => (stop = s));
  let consuming = true;
  const poll = () => {
    if (!consuming || consumer.closed) return;
    const corr = consumer.nextCorrelationId();
    consumer.send(corr, [fetchRequest(d.topic, offsets, corr, fetchOpts)], (body, at) => {
      const { batches, errors: errs } = parseFetch(body);
      for (const b of batches) {
        if (b.baseOffset < offsets[b.partition]) continue;
        offsets[b.partition] = b.nextOffset;
        out.consumed += b.records;
        out.stamps.push(b.stamp);
        out.latenciesMs.push((at - b.stamp) * 1000);
      }
      if (errs.length > 0) {
        out.errors += errs.length;
        setTimeout(poll, 50);
      } else poll();
    });
  };
  try {
    poll();
    for (;;) {
      await sleep(10);
      const s = stop as ConsumerWorkerStop | null;
      if (consumer.closed || (s !== null && (out.consumed >= s.produced || Date.now() >= s.deadline))) break;
    }
    if (consumer.error) out.error = String(consumer.error.message);
  } finally {
    consuming = false;
    consumer.close();
  }
  return out;
}

// ------------------------------------------------------------------ cold replay

/**
 * Produces `batches` pre-encoded batches of `recordsPerBatch` 1 KiB records (acks=all) round-robin over the
 * partitions, as fast as the broker takes them (same connections and in-flight limit as the throughput run), and
 * resolves once all are acknowledged. Used to lay down the stream the replay reads back.
 */
export async function kafkaProduceBatches(
  port: number,
  o: { topic: string; partitions: number; connections: number; inflight: number; recordsPerBatch: number; recordBytes: number; batches: number },
): Promise<{ seconds: number; mbPerSec: number }> {
  const batch = encodeBatch(recordsOf(o.recordsPerBatch, o.recordBytes, Date.now()));
  const conns = await Promise.all(Array.from({ length: o.connections }, () => KafkaConn.open(port)));
  let sent = 0;
  let acked = 0;
  const t0 = nowS();
  try {
    await new Promise<void>((resolve, reject) => {
      const pump = (conn: KafkaConn) => {
        if (conn.error) return reject(conn.error);
        while (sent < o.batches && !conn.closed && conn.outstanding < o.inflight) {
          const partition = sent++ % o.partitions;
          const corr = conn.nextCorrelationId();
          conn.send(corr, [produceHead(o.topic, partition, batch.length, corr), batch], (body) => {
            const code = produceError(body);
            if (code !== 0) return reject(new Error(`produce to partition ${partition} failed with Kafka error ${code}`));
            if (++acked === o.batches) resolve();
            else pump(conn);
          });
        }
      };
      for (const c of conns) {
        c.socket.once('close', () => acked < o.batches && reject(c.error ?? new Error('producer connection closed')));
        pump(c);
      }
    });
    const seconds = nowS() - t0;
    return { seconds, mbPerSec: (o.batches * o.recordsPerBatch * o.recordBytes) / seconds / 1e6 };
  } finally {
    for (const c of conns) c.close();
  }
}

export interface ReplayResult {
  /** Record value bytes read back per second (1 MB = 10^6 bytes). */
  mbPerSec: number;
  /** Batch bytes (what the Fetch responses carried) per second. */
  wireMbPerSec: number;
  records: number;
  seconds: number;
  fetches: number;
}

/**
 * Reads partitions 0..n-1 of `topic` from offset 0 up to `ends[p]` (exclusive), one connection per partition (as
 * one consumer per partition of a group would), each with one Fetch v4 outstanding at a time, and measures from the
 * first request to the last response. Every offset must come back exactly once, in order.
 */
export async function kafkaReplay(
  port: number,
  o: { topic: string; ends: number[]; recordBytes: number; partitionMaxBytes: number; timeoutS: number },
): Promise<ReplayResult> {
  const conns = await Promise.all(o.ends.map(() => KafkaConn.open(port)));
  const fetchOpts = { maxWaitMs: 500, minBytes: 1, maxBytes: o.partitionMaxBytes, partitionMaxBytes: o.partitionMaxBytes };
  let records = 0;
  let wireBytes = 0;
  let fetches = 0;
  const t0 = nowS();
  try {
    await Promise.all(
      conns.map(
        (conn, p) =>
          new Promise<void>((resolve, reject) => {
            let offset = 0;
            const timer = setTimeout(
              () => reject(new Error(`replay of partition ${p} stuck at offset ${offset} of ${o.ends[p]} after ${o.timeoutS} s`)),
              o.timeoutS * 1000,
            );
            const done = (err?: Error) => {
              clearTimeout(timer);
              if (err) reject(err);
              else resolve();
            };
            conn.socket.once('close', () => offset < o.ends[p] && done(conn.error ?? new Error(`consumer of partition ${p} closed`)));
            const poll = () => {
              if (offset >= o.ends[p]) return done();
              const corr = conn.nextCorrelationId();
              fetches++;
              conn.send(corr, [fetchRequest(o.topic, [offset], corr, fetchOpts, [p])], (body) => {
                const { batches, errors } = parseFetch(body);
                const mine = errors.find((e) => e.partition === p);
                if (mine) return done(new Error(`fetch of partition ${p} at offset ${offset}: Kafka error ${mine.code}`));
                for (const b of batches) {
                  if (b.partition !== p) continue;
                  if (b.baseOffset !== offset) return done(new Error(`partition ${p}: batch at offset ${b.baseOffset}, expected ${offset}`));
                  offset = b.nextOffset;
                  records += b.records;
                }
                wireBytes += body.length;
                poll();
              });
            };
            poll();
          }),
      ),
    );
    const seconds = nowS() - t0;
    return { mbPerSec: (records * o.recordBytes) / seconds / 1e6, wireMbPerSec: wireBytes / seconds / 1e6, records, seconds, fetches };
  } finally {
    for (const c of conns) c.close();
  }
}
