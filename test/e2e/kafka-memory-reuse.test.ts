// test-runner: alone (scripts/test.mjs): measures the broker process's memory while clients load it, without a second file competing for the two cores
/**
 * The Kafka hot path's memory reuse, end to end with real clients against a real `flowmq start` process: large
 * Produce frames come from a pool and go back to it (frame-pool.ts), large batches are copied into 4 MiB chunks
 * of the log that are reused once their batches are sealed and no fetch response holds them (batch-memory.ts),
 * and plain TCP sockets are read into one shared buffer (read-into.ts).
 *
 * Three KafkaJS producers (large plain and gzip sends, small ones; one idempotent) write to three partitions
 * while a KafkaJS group consumer reads along, mostly from the partitions' in-memory tails. Every record checks
 * itself: its key names its producer, partition and sequence number and its value is derived from the key, so
 * memory reused too early shows up as a corrupt value, a gap, a duplicate or a record in the wrong partition.
 * Production runs in phases; between them every tail is sealed (flush) while the partitions are quiet, so chunks
 * still current for a partition lose their last reference too. In each phase a slow reader (a bare Kafka
 * connection that stops reading) leaves large Fetch responses of a partition's oldest unsealed batches in the
 * broker's socket queue until the next phase is produced, across a flush and the reuse of their chunks: the bytes
 * it finally receives must still be the records asked for.
 * Afterwards kcat reads the whole topic again, mostly from sealed segments, and must see exactly the same log,
 * and the broker's figures must show the reuse paths were taken.
 *
 * Two layouts: 1 MiB segments with the per-partition WAL (seals all the time: chunks cycle fast), and 4 MiB
 * segments with the shared WAL, whose tails outgrow a chunk (batches stay in retired chunks) and whose segments
 * are written from chunk memory. With 1 MiB segments alone, a chunk recycled while batches in it are still
 * unsealed goes unnoticed by the consumers: its own partition takes it back at once and overwrites it from the
 * start, reaching the unsealed batches at its end only after they were sealed (and, with the per-partition WAL,
 * segments are the WAL's files, written before the chunk could be reused).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import kafkajsPkg from 'kafkajs';
import type { Kafka as KafkaClient, Message, Producer } from 'kafkajs';
import { decodeBatch, readBatchInfo, verifyBatchCrc } from '../../src/core/index.js';
import { decodeResponse, encodeRequest, FetchApi, type FetchRequest } from '../../src/protocols/kafka/codec/index.js';
import { eventually, FlowmqProcess, run, sleep } from './harness.js';

const { Kafka, logLevel, CompressionTypes } = kafkajsPkg;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const TOPIC = 'reuse';
const PARTITIONS = 3;
const PRODUCERS = 3;
/** Phases of production, the tails sealed between them; sends per producer in each. */
const PHASES = 3;
const ROUNDS_PER_PHASE = 20;
const MIB = 1024 * 1024;

/**
 * 1 MiB of printable, deterministic pseudo-random bytes (hex of a sha256 chain): every value is a slice of it at
 * an offset and of a length derived from its key, so whoever reads it can recompute and compare it.
 */
const POOL = (() => {
  const parts: Buffer[] = [];
  for (let i = 0; i < MIB / 64; i++) parts.push(Buffer.from(createHash('sha256').update(`pool-${i}`).digest('hex')));
  return Buffer.concat(parts);
})();

/** Keys are `producer.partition.seq.kind`, kind L (a 1-4 KiB value) or S (8-127 bytes). */
function valueFor(key: string): Buffer {
  const h = createHash('sha256').update(key).digest();
  const len = key.endsWith('.S') ? 8 + (h[4] % 120) : 1024 + (h.readUInt16BE(4) % 3073);
  const off = h.readUInt32BE(0) % (POOL.length - len);
  return POOL.subarray(off, off + len);
}

/** What is wrong with a record read from `partition` (its key, its value), or null. */
function recordProblem(partition: number, key: string, value: Buffer): string | null {
  const [p, q, seq, kind] = key.split('.');
  const producer = Number(p);
  if (!(producer >= 0 && producer < PRODUCERS) || Number(q) !== partition || !/^\d+$/.test(seq ?? '') || (kind !== 'L' && kind !== 'S')) {
    return `unexpected key ${JSON.stringify(key.slice(0, 60))}`;
  }
  const expected = valueFor(key);
  if (value.equals(expected)) return null;
  let at = 0;
  while (at < Math.min(value.length, expected.length) && value[at] === expected[at]) at++;
  return `key ${key}: value of ${value.length} bytes differs from the ${expected.length} expected at byte ${at}`;
}

const MASK = (1n << 256n) - 1n;

/** An order-independent digest of a set of records (a sum, not a xor, so that duplicates do not cancel out). */
class Tally {
  count = 0;
  sum = 0n;
  bytes = 0;
  add(key: string, value: Buffer): void {
    const h = createHash('sha256').update(key).update('\0').update(value).digest('hex');
    this.sum = (this.sum + BigInt(`0x${h}`)) & MASK;
    this.count++;
    this.bytes += value.length;
  }
}

/** Problems found by one reader: counted, the first few kept for the assertion message. */
class Problems {
  count = 0;
  readonly examples: string[] = [];
  constructor(readonly reader: string) {}
  add(what: string): void {
    this.count++;
    if (this.examples.length < 20) this.examples.push(`${this.reader}: ${what}`);
  }
}

/** Checks one full read of the topic from the beginning, record by record, and digests it per partition. */
class ReadCheck {
  readonly tallies = Array.from({ length: PARTITIONS }, () => new Tally());
  /** sha256 over every record in offset order, per partition: two reads of the same log must agree. */
  private readonly chains = Array.from({ length: PARTITIONS }, () => createHash('sha256'));
  private readonly nextOffset = new Array<number>(PARTITIONS).fill(0);
  /** Next sequence number expected per partition and producer. */
  readonly nextSeq = Array.from({ length: PARTITIONS }, () => new Array<number>(PRODUCERS).fill(0));
  readonly problems: Problems;

  constructor(reader: string) {
    this.problems = new Problems(reader);
  }

  get count(): number {
    return this.tallies.reduce((n, t) => n + t.count, 0);
  }

  record(partition: number, offset: number, key: string, value: Buffer): void {
    if (!(partition >= 0 && partition < PARTITIONS)) {
      this.problems.add(`record from unknown partition ${partition}: ${key.slice(0, 60)}`);
      return;
    }
    const at = `partition ${partition} offset ${offset}`;
    if (offset !== this.nextOffset[partition]) this.problems.add(`${at}: expected offset ${this.nextOffset[partition]}`);
    this.nextOffset[partition] = offset + 1;
    const problem = recordProblem(partition, key, value);
    if (problem !== null) this.problems.add(`${at}: ${problem}`);
    else {
      const [p, , seq] = key.split('.');
      const want = this.nextSeq[partition][Number(p)];
      if (Number(seq) !== want) this.problems.add(`${at}: producer ${p} sequence ${seq}, expected ${want}`);
      this.nextSeq[partition][Number(p)] = Number(seq) + 1;
    }
    this.tallies[partition].add(key, value);
    this.chains[partition].update(`${offset} ${key} `).update(value).update('\n');
  }

  digests(): string[] {
    return this.chains.map((c) => c.digest('hex'));
  }
}

function kafkaFor(broker: FlowmqProcess, clientId: string): KafkaClient {
  return new Kafka({ brokers: [broker.kafka], clientId, logLevel: logLevel.NOTHING, retry: { retries: 5, initialRetryTime: 100 } });
}

/** One producer's state across phases: its next sequence number per partition, and its sends so far. */
interface ProducerRun {
  id: number;
  producer: Producer;
  seq: number[];
  round: number;
}

/**
 * Uncompressed large batches sent (50+ records of 1-4 KiB, ~2.5 KiB on average: far over the 64 KiB from which
 * batches are copied into chunks), and the bytes of their values.
 */
interface Plain {
  batches: number;
  bytes: number;
}

/**
 * `rounds` sends, one at a time (so each partition gets a producer's records in sequence order), each to all
 * partitions: mostly large uncompressed batches (~0.5 MB a request), every fifth gzip-compressed, every seventh
 * a few small records, and now and then a huge one (~3 MB: a frame the broker receives over several reads,
 * while other connections' frames arrive too). Records are tallied per partition once acknowledged.
 */
async function produceRounds(pr: ProducerRun, rounds: number, produced: Tally[], plain: Plain): Promise<void> {
  for (let k = 0; k < rounds; k++, pr.round++) {
    const round = pr.round;
    // The first send of each phase is huge for every producer: they start together, so three frames of ~3 MB
    // (each received over several reads) arrive at once.
    const huge = k === 0;
    const small = !huge && round % 7 === 5;
    const gzip = !huge && !small && round % 5 === 3;
    const messages: Array<Message & { partition: number; key: string; value: Buffer }> = [];
    for (let partition = 0; partition < PARTITIONS; partition++) {
      const n = small ? 3 + ((pr.id + round + partition) % 10) : (huge ? 400 : 50) + ((pr.id * 7 + round * 13 + partition * 5) % 31);
      for (let i = 0; i < n; i++) {
        const key = `${pr.id}.${partition}.${pr.seq[partition]++}.${small ? 'S' : 'L'}`;
        messages.push({ key, value: valueFor(key), partition });
      }
    }
    await pr.producer.send({ topic: TOPIC, messages, acks: -1, compression: gzip ? CompressionTypes.GZIP : CompressionTypes.None });
    for (const m of messages) produced[m.partition].add(m.key, m.value);
    if (!small && !gzip) {
      plain.batches += PARTITIONS;
      for (const m of messages) plain.bytes += m.value.length;
    }
  }
}

interface PartitionDetail {
  partition: number;
  highWatermark: number;
  flushedOffset: number;
  tailBytes: number;
}

/**
 * Response frames (without their size prefixes) read from `socket` until `count` have arrived; bytes are gathered
 * and joined once per frame, not once per read.
 */
function readFrames(socket: Socket, count: number, timeoutMs: number): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const frames: Buffer[] = [];
    let parts: Buffer[] = [];
    let have = 0;
    let need = 4;
    let size = -1;
    const timer = setTimeout(() => finish(new Error(`${frames.length} of ${count} responses within ${timeoutMs} ms`)), timeoutMs);
    const finish = (err?: Error): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      if (err) reject(err);
      else resolve(frames);
    };
    const onClose = (): void => finish(new Error(`connection closed after ${frames.length} of ${count} responses`));
    const onData = (d: Buffer): void => {
      parts.push(d);
      have += d.length;
      while (have >= need && frames.length < count) {
        const buf = parts.length === 1 ? parts[0] : Buffer.concat(parts);
        if (size < 0) {
          size = buf.readInt32BE(0);
          need = 4 + size;
          parts = [buf];
          continue;
        }
        frames.push(buf.subarray(4, need));
        parts = [buf.subarray(need)];
        have -= need;
        need = 4;
        size = -1;
      }
      if (frames.length === count) finish();
    };
    socket.on('data', onData);
    socket.on('close', onClose);
    socket.resume();
  });
}

/**
 * A reader that asks several times (pipelined) for the oldest unsealed batches of one partition (up to 2 MiB: its
 * tail, in chunk memory) and then stops reading its socket until `release` resolves: the first responses fill the
 * sockets' kernel buffers (about 3 MB on loopback), the rest stays in the broker's write queue, pointing into chunk
 * memory, while the producers go on and seals make chunks reusable. The records finally received must be intact
 * and where they were asked for. Returns the records checked.
 */
async function slowFetch(broker: FlowmqProcess, partition: number, release: Promise<void>, problems: Problems): Promise<number> {
  const details = (await broker.api<{ partitionDetails: PartitionDetail[] }>('GET', `/api/v1/streams/${TOPIC}`)).partitionDetails;
  const detail = details.find((d) => d.partition === partition)!;
  const from = detail.flushedOffset;
  const socket = connect(broker.ports.kafka, '127.0.0.1');
  socket.on('error', () => undefined); // 'close' follows, and says so
  socket.pause();
  await once(socket, 'connect');
  const version = 11;
  let records = 0;
  try {
    // Enough requests for about 8 MiB of responses, most of it beyond what the kernel buffers.
    const each = Math.max(64 * 1024, Math.min(detail.tailBytes, 2 * MIB));
    const requests = Array.from({ length: Math.min(16, Math.max(2, Math.ceil((8 * MIB) / each))) }, (_, i) => 101 + i);
    const body: FetchRequest = {
      replicaId: -1,
      maxWaitMs: 0,
      minBytes: 1,
      maxBytes: 16 * MIB,
      isolationLevel: 0,
      sessionId: 0,
      sessionEpoch: -1,
      topics: [
        {
          topic: TOPIC,
          partitions: [{ partition, currentLeaderEpoch: -1, fetchOffset: from, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 2 * MIB }],
        },
      ],
      forgottenTopics: [],
      rackId: '',
      clusterId: null,
    };
    socket.write(
      Buffer.concat(
        requests.map((correlationId) => encodeRequest(FetchApi, { apiVersion: version, correlationId, clientId: 'slow-reader' }, body, { sizePrefix: true })),
      ),
    );
    await release;
    const frames = await readFrames(socket, requests.length, 30_000);
    for (const [i, correlationId] of requests.entries()) {
      const res = decodeResponse(FetchApi, version, frames[i]);
      assert.equal(res.correlationId, correlationId);
      for (const p of res.body.responses[0]?.partitions ?? []) {
        const at = `response ${correlationId}, partition ${p.partitionIndex} from offset ${from}`;
        if (p.errorCode !== 0) {
          problems.add(`${at}: error ${p.errorCode}`);
          continue;
        }
        const raw = Buffer.concat(p.records ?? []);
        let next = -1;
        for (let pos = 0; pos < raw.length;) {
          try {
            const info = readBatchInfo(raw, pos);
            if (!verifyBatchCrc(raw, pos, info.size)) problems.add(`${at}: batch at ${info.baseOffset} fails its CRC`);
            for (const r of decodeBatch(raw.subarray(pos, pos + info.size))) {
              if (next < 0 ? r.offset > from : r.offset !== next) problems.add(`${at}: offset ${r.offset} after ${next < 0 ? 'the start' : next - 1}`);
              next = r.offset + 1;
              const problem = recordProblem(p.partitionIndex, r.key?.toString('latin1') ?? '<null>', r.value ?? Buffer.alloc(0));
              if (problem !== null) problems.add(`${at}: offset ${r.offset}: ${problem}`);
              records++;
            }
            pos += info.size;
          } catch (err) {
            problems.add(`${at}: undecodable batch at byte ${pos}: ${String(err)}`);
            break;
          }
        }
      }
    }
  } finally {
    socket.destroy();
  }
  return records;
}

interface BrokerInfo {
  storage: { log: { sealedSegments: number; objectReads: number }; batchMemory: { chunkBytes: number; pooledBatches: number; ownBatches: number } };
  kafka: { framePool: { allocated: number; reused: number; gathered: number; aheadBytes: number } };
}

async function exercise(broker: FlowmqProcess, minSegments: number): Promise<string> {
  const started = Date.now();
  const kafka = kafkaFor(broker, 'memory-reuse-e2e');
  const admin = kafka.admin();
  await admin.connect();
  assert.equal(await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true }), true);
  await admin.disconnect();

  // The consumer joins first, then reads along while the producers write (mostly from the hot tails, its fetch
  // responses pinning chunks until their bytes are written to the socket).
  const live = new ReadCheck('kafkajs consumer');
  const crashes: string[] = [];
  const consumer = kafka.consumer({ groupId: 'reuse-readers', maxWaitTimeInMs: 100, sessionTimeout: 30_000, heartbeatInterval: 1000 });
  let joined = false;
  consumer.on(consumer.events.GROUP_JOIN, () => (joined = true));
  consumer.on(consumer.events.CRASH, (e) => void crashes.push(String(e.payload.error)));
  await consumer.connect();
  await consumer.subscribe({ topics: [TOPIC], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      live.record(partition, Number(message.offset), message.key?.toString('latin1') ?? '<null>', message.value ?? Buffer.alloc(0));
    },
  });
  await eventually(() => joined, 20_000, 'the consumer to join its group');

  const produced = Array.from({ length: PARTITIONS }, () => new Tally());
  const plain: Plain = { batches: 0, bytes: 0 };
  const producers: ProducerRun[] = Array.from({ length: PRODUCERS }, (_, id) => ({
    id,
    producer: kafka.producer(id === 0 ? { idempotent: true, maxInFlightRequests: 1 } : { allowAutoTopicCreation: false }),
    seq: new Array<number>(PARTITIONS).fill(0),
    round: 0,
  }));
  await Promise.all(producers.map((p) => p.producer.connect()));
  const slow = new Problems('slow fetch');
  let slowRecords = 0;
  let stalled: string | null = null;
  const caughtUp = (): boolean => live.count >= produced.reduce((n, t) => n + t.count, 0) || live.problems.count > 0 || crashes.length > 0;
  // Each phase's slow read is held across the next flush and released once the next phase is produced: by then
  // every batch it points to is sealed and its chunks, but for its pins, reused.
  const slowRead = (phase: number): { release: () => void; done: Promise<void> } => {
    let release = (): void => undefined;
    const released = new Promise<void>((r) => (release = r));
    const done = sleep(500)
      .then(() => slowFetch(broker, phase % PARTITIONS, released, slow))
      .then((n) => void (slowRecords += n));
    done.catch(() => undefined); // awaited (and so reported) when released
    return { release, done };
  };
  let held: ReturnType<typeof slowRead> | null = null;
  for (let phase = 0; phase < PHASES; phase++) {
    const next = slowRead(phase);
    await Promise.all(producers.map((p) => produceRounds(p, ROUNDS_PER_PHASE, produced, plain)));
    if (held !== null) {
      held.release();
      await held.done;
    }
    held = next;
    // Quiet partitions: once the consumer has read everything, every tail is sealed, the chunks still current for
    // their partitions included; the next phase appends into them again. A consumer that stops making progress
    // (a client stuck on a batch it cannot parse) ends production early: the checks below say what went wrong.
    const stuck = await eventually(caughtUp, 15_000).then(
      () => false,
      () => true,
    );
    if (stuck) {
      stalled = `after phase ${phase}, the consumer read ${live.count} of ${produced.reduce((n, t) => n + t.count, 0)} records`;
      break;
    }
    await broker.api('POST', `/api/v1/streams/${TOPIC}/flush`);
  }
  if (held !== null) {
    held.release();
    await held.done;
  }
  await Promise.all(producers.map((p) => p.producer.disconnect()));
  const producedAt = Date.now();
  const total = produced.reduce((n, t) => n + t.count, 0);
  const totalBytes = produced.reduce((n, t) => n + t.bytes, 0);
  await consumer.disconnect();
  const consumedAt = Date.now();

  // Everything again with kcat (librdkafka, CRCs checked), now mostly from sealed segments.
  const kcat = await run(
    'kcat',
    ['-C', '-b', broker.kafka, '-t', TOPIC, '-o', 'beginning', '-e', '-q', '-X', 'check.crcs=true', '-X', 'fetch.wait.max.ms=50', '-f', '%p %o %k %s\n'],
    { timeoutMs: 60_000 },
  );
  const reread = new ReadCheck('kcat');
  for (const line of kcat.stdout.split('\n')) {
    if (line === '') continue;
    const [p, o, k, v, ...rest] = line.split(' ');
    if (rest.length > 0 || v === undefined) reread.problems.add(`unparsable line ${JSON.stringify(line.slice(0, 80))}`);
    else reread.record(Number(p), Number(o), k, Buffer.from(v, 'latin1'));
  }
  const rereadAt = Date.now();

  const found = [live.problems, slow, reread.problems].filter((p) => p.count > 0);
  if (found.length > 0 || crashes.length > 0 || stalled !== null || kcat.code !== 0) {
    // Every reader's findings at once (the assertions below stop at the first).
    console.log(
      JSON.stringify(
        {
          crashes,
          stalled,
          kcat: { code: kcat.code, stderr: kcat.stderr.slice(0, 2000) },
          problems: found.map((p) => ({ reader: p.reader, count: p.count, first: p.examples.slice(0, 5) })),
        },
        null,
        2,
      ),
    );
  }
  assert.deepEqual(crashes, [], 'the consumer did not crash');
  assert.deepEqual(live.problems.examples, [], `${live.problems.count} problems in what the consumer read`);
  assert.deepEqual(slow.examples, [], `${slow.count} problems in what the slow reader received`);
  assert.ok(slowRecords > 0, 'the slow reader received records');
  assert.equal(kcat.code, 0, kcat.stderr);
  assert.deepEqual(reread.problems.examples, [], `${reread.problems.count} problems in what kcat read`);
  assert.equal(kcat.stderr.trim(), '', 'kcat reported no errors (CRC mismatches among them)');
  assert.equal(stalled, null, 'the consumer kept up');

  // Counts and digests: as produced, as consumed live, as read back.
  for (let p = 0; p < PARTITIONS; p++) {
    assert.equal(live.tallies[p].count, produced[p].count, `partition ${p}: records consumed`);
    assert.equal(reread.tallies[p].count, produced[p].count, `partition ${p}: records read by kcat`);
    assert.equal(live.tallies[p].sum, produced[p].sum, `partition ${p}: digest of what was consumed`);
    assert.equal(reread.tallies[p].sum, produced[p].sum, `partition ${p}: digest of what kcat read`);
  }
  assert.deepEqual(reread.digests(), live.digests(), 'both reads saw the same records at the same offsets');
  const sent = producers.map((pr) => pr.seq);
  assert.deepEqual(
    live.nextSeq,
    Array.from({ length: PARTITIONS }, (_, q) => sent.map((s) => s[q])),
    'every producer sequence read complete',
  );
  assert.deepEqual(reread.nextSeq, live.nextSeq, 'every producer sequence complete in both reads');

  // The reuse paths were taken: batches were copied into chunks, more bytes went through the chunks than all the
  // chunks ever allocated hold (so chunks were reused), frames came back from the pool, segments were sealed.
  const info = await broker.api<BrokerInfo>('GET', '/api/v1/broker');
  const mem = info.storage.batchMemory;
  const figures = JSON.stringify({
    ...mem,
    plain,
    framePool: info.kafka.framePool,
    sealedSegments: info.storage.log.sealedSegments,
    objectReads: info.storage.log.objectReads,
  });
  assert.ok(mem.pooledBatches >= plain.batches, `every large uncompressed batch copied into a chunk: ${figures}`);
  assert.ok(mem.ownBatches > 0, `small batches in buffers of their own: ${figures}`);
  assert.ok(mem.chunkBytes > 0 && plain.bytes > mem.chunkBytes, `chunk memory reused: ${figures}`);
  assert.ok(info.kafka.framePool.reused > 0, `request frames reused: ${figures}`);
  // Producers' requests fit in the reserve of memory ahead of arrival: none was gathered in pieces (the slow path).
  assert.equal(info.kafka.framePool.gathered, 0, `every request frame taken whole: ${figures}`);
  assert.equal(info.kafka.framePool.aheadBytes, 0, `no memory left reserved once the producers are done: ${figures}`);
  assert.ok(info.storage.log.sealedSegments >= minSegments, `segments sealed: ${figures}`);

  const bad = broker.logs.filter((l) => l.level >= 40);
  assert.deepEqual(bad, [], 'no warnings or errors (refused corrupt batches, malformed requests...) in the broker log');
  return (
    `${total} records, ${(totalBytes / 1e6).toFixed(1)} MB of values; produced in ${producedAt - started} ms, consumer caught up ` +
    `+${consumedAt - producedAt} ms, kcat +${rereadAt - consumedAt} ms; slow reader ${slowRecords} records; ${figures}`
  );
}

const SCENARIOS = [
  // A small read cache: sealed batches kept for readers a little behind pin chunks too (and are read from them).
  {
    name: '1 MiB segments, per-partition WAL (chunks cycle fast)',
    args: ['--segment-bytes', String(MIB), '--read-cache-bytes', String(8 * MIB)],
    minSegments: 40,
  },
  {
    name: '4 MiB segments, shared WAL (tails longer than a chunk, segments written from chunk memory)',
    args: ['--segment-bytes', String(4 * MIB), '--wal-layout', 'shared', '--read-cache-bytes', String(8 * MIB)],
    minSegments: 8,
  },
];

for (const s of SCENARIOS) {
  describe(`kafka memory reuse with real clients: ${s.name}`, () => {
    let broker: FlowmqProcess;
    before(async () => {
      broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0', ...s.args] });
    });
    after(async () => {
      await broker?.stop();
      broker?.cleanup();
    });

    it('concurrent producers, a live consumer group, a slow reader and kcat all see every record intact', { timeout: 120_000 }, async () => {
      const summary = await exercise(broker, s.minSegments);
      console.log(`memory reuse (${s.name}): ${summary}`);
    });
  });
}
