/**
 * The Kafka hot path's memory reuse, end to end with real clients against a real `flowmq start` process: large
 * Produce frames come from a pool and go back to it (frame-pool.ts), large batches are copied into 4 MiB chunks
 * of the log that are reused once their batches are sealed and no fetch response holds them (batch-memory.ts),
 * and plain TCP sockets are read into one shared buffer (read-into.ts). With 1 MiB segments, seals (and so chunk
 * reuse) happen all the time while three KafkaJS producers (plain, gzip and small sends; one idempotent) write
 * and a KafkaJS group consumer reads along, mostly from the partitions' tails. Every record is self-checking (its
 * value is derived from its key, which names its producer, partition and sequence number), so memory reused too
 * early shows up as a corrupt value, a gap, a duplicate or a record in the wrong partition; kcat then reads the
 * whole topic again, mostly from sealed segments, and must see exactly the same log.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import kafkajsPkg from 'kafkajs';
import type { Kafka as KafkaClient, Message, Producer } from 'kafkajs';
import { eventually, FlowmqProcess, run } from './harness.js';

const { Kafka, logLevel, CompressionTypes } = kafkajsPkg;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const TOPIC = 'reuse';
const PARTITIONS = 3;
const PRODUCERS = 3;
/** Sends per producer; each large one carries 50-80 records of 1-4 KiB per partition (~0.5 MB a request). */
const ROUNDS = 100;

/**
 * 1 MiB of printable, deterministic pseudo-random bytes (hex of a sha256 chain): every value is a slice of it at
 * an offset and of a length derived from its key, so it can be recomputed and compared by whoever reads it.
 */
const POOL = (() => {
  const parts: Buffer[] = [];
  for (let i = 0; i < (1 << 20) / 64; i++) parts.push(Buffer.from(createHash('sha256').update(`pool-${i}`).digest('hex')));
  return Buffer.concat(parts);
})();

/** Keys are `producer.partition.seq.kind`, kind L (1-4 KiB value) or S (8-127 bytes). */
function valueFor(key: string): Buffer {
  const h = createHash('sha256').update(key).digest();
  const len = key.endsWith('.S') ? 8 + (h[4] % 120) : 1024 + (h.readUInt16BE(4) % 3073);
  const off = h.readUInt32BE(0) % (POOL.length - len);
  return POOL.subarray(off, off + len);
}

const MASK = (1n << 256n) - 1n;

/** An order-independent digest of a set of records (sum, not xor, so that duplicates do not cancel out). */
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

/** Checks one full read of the topic, record by record, and digests it per partition in offset order. */
class ReadCheck {
  readonly tallies = Array.from({ length: PARTITIONS }, () => new Tally());
  /** sha256 over every record in offset order, per partition: two reads of the same log must agree. */
  private readonly chains = Array.from({ length: PARTITIONS }, () => createHash('sha256'));
  /** Next offset expected per partition, and next sequence number per partition and producer. */
  private readonly nextOffset = new Array<number>(PARTITIONS).fill(0);
  readonly nextSeq = Array.from({ length: PARTITIONS }, () => new Array<number>(PRODUCERS).fill(0));
  problems = 0;
  readonly examples: string[] = [];

  constructor(readonly name: string) {}

  get count(): number {
    return this.tallies.reduce((n, t) => n + t.count, 0);
  }

  private problem(what: string): void {
    this.problems++;
    if (this.examples.length < 20) this.examples.push(`${this.name}: ${what}`);
  }

  record(partition: number, offset: number, key: string, value: Buffer): void {
    if (!(partition >= 0 && partition < PARTITIONS)) {
      this.problem(`record from unknown partition ${partition}`);
      return;
    }
    if (offset !== this.nextOffset[partition]) this.problem(`partition ${partition}: offset ${offset}, expected ${this.nextOffset[partition]}`);
    this.nextOffset[partition] = offset + 1;
    const [p, q, seq, kind] = key.split('.');
    const producer = Number(p);
    if (!(producer >= 0 && producer < PRODUCERS) || Number(q) !== partition || !/^\d+$/.test(seq ?? '') || (kind !== 'L' && kind !== 'S')) {
      this.problem(`partition ${partition} offset ${offset}: unexpected key ${JSON.stringify(key.slice(0, 60))}`);
    } else {
      const want = this.nextSeq[partition][producer];
      if (Number(seq) !== want) this.problem(`partition ${partition} offset ${offset}: producer ${producer} sequence ${seq}, expected ${want}`);
      this.nextSeq[partition][producer] = Number(seq) + 1;
      const expected = valueFor(key);
      if (!value.equals(expected)) {
        let at = 0;
        while (at < Math.min(value.length, expected.length) && value[at] === expected[at]) at++;
        this.problem(`partition ${partition} offset ${offset} key ${key}: value of ${value.length} bytes differs from the ${expected.length} expected at byte ${at}`);
      }
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

/**
 * Producer `id`: ROUNDS sends, one at a time (so each partition gets its records in sequence order), every one
 * to all partitions: mostly large uncompressed batches, every fifth gzip-compressed, every seventh a few small
 * records. Records are tallied per partition once acknowledged.
 */
async function producerLoop(producer: Producer, id: number, produced: Tally[], plain: { batches: number; bytes: number }): Promise<void> {
  const seq = new Array<number>(PARTITIONS).fill(0);
  for (let round = 0; round < ROUNDS; round++) {
    const small = round % 7 === 5;
    const gzip = !small && round % 5 === 3;
    const messages: Array<Message & { partition: number }> = [];
    for (let partition = 0; partition < PARTITIONS; partition++) {
      const n = small ? 3 + ((id + round + partition) % 10) : 50 + ((id * 7 + round * 13 + partition * 5) % 31);
      for (let i = 0; i < n; i++) {
        const key = `${id}.${partition}.${seq[partition]++}.${small ? 'S' : 'L'}`;
        messages.push({ key, value: valueFor(key), partition });
      }
    }
    await producer.send({ topic: TOPIC, messages, acks: -1, compression: gzip ? CompressionTypes.GZIP : CompressionTypes.None });
    for (const m of messages) produced[m.partition].add(m.key as string, m.value as Buffer);
    if (!small && !gzip) {
      plain.batches += PARTITIONS;
      for (const m of messages) plain.bytes += (m.value as Buffer).length;
    }
  }
}

interface BrokerInfo {
  storage: { log: { sealedSegments: number; objectReads: number }; batchMemory: { chunkBytes: number; pooledBatches: number; ownBatches: number } };
  kafka: { framePool: { allocated: number; reused: number } };
}

describe('kafka memory reuse (frame pool, batch chunks, shared read buffer) with real clients', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--segment-bytes', String(1024 * 1024), '--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('concurrent producers, a live consumer group and kcat all see every record intact', { timeout: 180_000 }, async () => {
    const started = Date.now();
    const kafka = kafkaFor(broker, 'memory-reuse-e2e');
    const admin = kafka.admin();
    await admin.connect();
    assert.equal(await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true }), true);
    await admin.disconnect();

    // The consumer joins first, then reads along while the producers write (mostly from the hot tails, with
    // fetch responses pinning chunks until their bytes are written to the socket).
    const live = new ReadCheck('kafkajs consumer');
    const consumer = kafka.consumer({ groupId: 'reuse-readers', maxWaitTimeInMs: 100, sessionTimeout: 30_000, heartbeatInterval: 1000 });
    let joined = false;
    consumer.on(consumer.events.GROUP_JOIN, () => (joined = true));
    await consumer.connect();
    await consumer.subscribe({ topics: [TOPIC], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        live.record(partition, Number(message.offset), message.key?.toString('latin1') ?? '<null>', message.value ?? Buffer.alloc(0));
      },
    });
    await eventually(() => joined, 20_000, 'the consumer to join its group');

    const produced = Array.from({ length: PARTITIONS }, () => new Tally());
    // Uncompressed large batches (50+ records of 1+ KiB: over 64 KiB, so all copied into chunks) and their bytes.
    const plain = { batches: 0, bytes: 0 };
    const producers = Array.from({ length: PRODUCERS }, (_, id) =>
      kafka.producer(id === 0 ? { idempotent: true, maxInFlightRequests: 1 } : { allowAutoTopicCreation: false }),
    );
    await Promise.all(producers.map((p) => p.connect()));
    await Promise.all(producers.map((p, id) => producerLoop(p, id, produced, plain)));
    await Promise.all(producers.map((p) => p.disconnect()));
    const producedAt = Date.now();
    const total = produced.reduce((n, t) => n + t.count, 0);
    const totalBytes = produced.reduce((n, t) => n + t.bytes, 0);

    await eventually(() => live.count >= total || live.problems > 0, 30_000, `the consumer to read all ${total} records (has ${live.count})`).catch(() => undefined);
    await consumer.disconnect();
    const consumedAt = Date.now();
    assert.deepEqual(live.examples, [], `${live.problems} problems in what the consumer read`);
    assert.equal(live.count, total, 'the consumer read every record');

    // Everything again with kcat (librdkafka, CRCs checked), now mostly from sealed segments.
    const kcat = await run(
      'kcat',
      ['-C', '-b', broker.kafka, '-t', TOPIC, '-o', 'beginning', '-e', '-q', '-X', 'check.crcs=true', '-X', 'fetch.wait.max.ms=50', '-f', '%p %o %k %s\n'],
      { timeoutMs: 60_000 },
    );
    assert.equal(kcat.code, 0, kcat.stderr);
    assert.equal(kcat.stderr.trim(), '', 'kcat reported no errors (CRC mismatches among them)');
    const reread = new ReadCheck('kcat');
    for (const line of kcat.stdout.split('\n')) {
      if (line === '') continue;
      const [p, o, k, v, ...rest] = line.split(' ');
      if (rest.length > 0 || v === undefined) {
        reread.record(-1, -1, line.slice(0, 60), Buffer.alloc(0));
        continue;
      }
      reread.record(Number(p), Number(o), k, Buffer.from(v, 'latin1'));
    }
    const rereadAt = Date.now();
    assert.deepEqual(reread.examples, [], `${reread.problems} problems in what kcat read`);

    // Counts and digests: as produced, as consumed live, as read back.
    for (let p = 0; p < PARTITIONS; p++) {
      assert.equal(live.tallies[p].count, produced[p].count, `partition ${p}: records consumed`);
      assert.equal(reread.tallies[p].count, produced[p].count, `partition ${p}: records read by kcat`);
      assert.equal(live.tallies[p].sum, produced[p].sum, `partition ${p}: digest of what was consumed`);
      assert.equal(reread.tallies[p].sum, produced[p].sum, `partition ${p}: digest of what kcat read`);
    }
    assert.deepEqual(reread.digests(), live.digests(), 'both reads saw the same records at the same offsets');
    assert.deepEqual(live.nextSeq, reread.nextSeq, 'every producer sequence complete in both reads');

    // The reuse paths were taken: batches were copied into chunks, and more bytes went through the chunks than
    // they hold (so chunks were reused several times over), frames came back from the pool, segments were sealed.
    const info = await broker.api<BrokerInfo>('GET', '/api/v1/broker');
    const mem = info.storage.batchMemory;
    assert.ok(mem.pooledBatches > 0, `batches copied into chunks: ${JSON.stringify(mem)}`);
    assert.ok(mem.ownBatches > 0, `small batches in buffers of their own: ${JSON.stringify(mem)}`);
    assert.ok(mem.pooledBatches >= plain.batches, `every large uncompressed batch copied into a chunk: ${JSON.stringify({ ...mem, plain })}`);
    assert.ok(mem.chunkBytes > 0 && plain.bytes > 3 * mem.chunkBytes, `chunk memory reused several times over: ${JSON.stringify({ ...mem, plain })}`);
    assert.ok(info.kafka.framePool.reused > 0, `request frames reused: ${JSON.stringify(info.kafka.framePool)}`);
    assert.ok(info.storage.log.sealedSegments >= totalBytes / (2 * 1024 * 1024), `segments sealed: ${info.storage.log.sealedSegments}`);

    const bad = broker.logs.filter((l) => l.level >= 50 || /corrupt/i.test(l.msg));
    assert.deepEqual(bad, [], 'no errors (and no refused corrupt batches) in the broker log');
    console.log(
      `memory reuse: ${total} records, ${(totalBytes / 1e6).toFixed(1)} MB values; produce ${producedAt - started} ms, ` +
        `consumer caught up +${consumedAt - producedAt} ms, kcat +${rereadAt - consumedAt} ms; ${JSON.stringify({ ...mem, ...info.kafka.framePool, sealedSegments: info.storage.log.sealedSegments, objectReads: info.storage.log.objectReads })}`,
    );
  });
});
