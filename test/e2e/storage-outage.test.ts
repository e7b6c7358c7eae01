// test-runner: alone (scripts/test.mjs): takes PostgreSQL and S3 away under a produce run and waits for the throttle; beside a second file it once stalled for 240 s with no seal failure counted (docs/testing.md)
/**
 * Outages of the shared backends during a produce run, against a real `flowmq start` on PostgreSQL (metastore
 * and WAL) + s3rver: PostgreSQL restarts, then the S3 server goes away for a while and comes back. Two KafkaJS
 * producers (acks=-1, one idempotent, one not) keep sending and retry what failed; a record counts as
 * acknowledged only when its send resolved. Afterwards kcat reads the stream from the beginning: every
 * acknowledged record is there, and the broker is the process that started.
 *
 * While S3 is down the WAL keeps acknowledging until the tails hold --max-unsealed-bytes, then acknowledgements
 * wait (the producers slow down, none is told "stored" for what is not); when S3 is back the tails are sealed and
 * the WAL trimmed without anyone asking (no flush call).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import type { Producer } from 'kafkajs';
import { eventually, FlowmqProcess, kcatConsume, sleep } from './harness.js';
import { sharedArgs, sharedServices, type SharedServices, type StorageFigures } from './storage-configs.js';

const { Kafka, logLevel } = kafkajsPkg;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const TOPIC = 'outage';
const RECORD_BYTES = 1024;
const BATCH = 16;
const MAX_UNSEALED = 1024 * 1024;

interface Details {
  partitionDetails: Array<{ partition: number; highWatermark: number; flushedOffset: number; tailBytes: number; segments: number }>;
}

interface Figures extends StorageFigures {
  storage: StorageFigures['storage'] & {
    metastoreFigures: { errors: number; reconnects: number };
    walFigures: { errors: number; failedGroups: number; reconnects: number };
  };
}

/**
 * A producer that sends batches one at a time and, when a send fails, sends the same records again (a new
 * producer after a few failures in a row, in case the client gave up on its connection state).
 */
class ProduceLoop {
  readonly acked = new Set<string>();
  failures = 0;
  lastError = '';
  private stopping = false;
  private done: Promise<void> | null = null;
  private producer: Producer | null = null;
  private next = 0;

  constructor(
    private readonly brokers: () => string,
    private readonly tag: string,
    private readonly idempotent: boolean,
  ) {}

  start(): void {
    this.done = this.loop();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.done;
    await this.producer?.disconnect().catch(() => undefined);
  }

  private async connect(): Promise<Producer> {
    const kafka = new Kafka({
      brokers: [this.brokers()],
      clientId: `outage-${this.tag}`,
      logLevel: logLevel.NOTHING,
      retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
      requestTimeout: 60_000,
    });
    const p = kafka.producer(this.idempotent ? { idempotent: true, maxInFlightRequests: 1 } : { allowAutoTopicCreation: false });
    await p.connect();
    return p;
  }

  private async loop(): Promise<void> {
    let inARow = 0;
    while (!this.stopping) {
      const first = this.next;
      const values = Array.from({ length: BATCH }, (_, i) => {
        const id = `${this.tag}-${first + i}`;
        return id + ':' + 'x'.repeat(RECORD_BYTES - id.length - 1);
      });
      try {
        this.producer ??= await this.connect();
        await this.producer.send({ topic: TOPIC, acks: -1, timeout: 60_000, messages: values.map((value, i) => ({ key: `k${(first + i) % 7}`, value })) });
        for (const v of values) this.acked.add(v.slice(0, v.indexOf(':')));
        this.next += BATCH;
        inARow = 0;
      } catch (err) {
        this.lastError = String((err as Error).message ?? err);
        // Not acknowledged: the same records go again (the broker may have stored them: duplicates are allowed,
        // losses are not).
        this.failures++;
        if (++inARow >= 3) {
          await this.producer?.disconnect().catch(() => undefined);
          this.producer = null;
          inARow = 0;
        }
        await sleep(200);
      }
    }
  }
}

describe('shared storage outages during a produce run (PostgreSQL restart, S3 down and back)', () => {
  const services = sharedServices();
  let svc: SharedServices;
  let broker: FlowmqProcess;

  before(async () => {
    svc = await services();
    const db = await svc.pg.createDatabase();
    broker = await FlowmqProcess.start({
      args: [
        ...sharedArgs(svc, db, `outage-${process.pid}`),
        // Small segments sealed often, so that the run moves data to S3 all the time; acknowledgements wait above
        // 1 MiB of unsealed tails; reads come from S3, not from a cache of recently sealed batches.
        '--segment-bytes',
        '128KiB',
        '--segment-ms',
        '300ms',
        '--max-unsealed-bytes',
        String(MAX_UNSEALED),
        '--read-cache-bytes',
        '0',
        // An S3 request fails fast while the server is gone (the seal is retried later anyway).
        '--s3-max-attempts',
        '2',
        '--s3-request-timeout',
        '2s',
      ],
    });
    await broker.api('POST', '/api/v1/streams', { name: TOPIC, partitions: 2 });
  });
  after(async () => {
    await broker?.stop('SIGKILL');
    broker?.cleanup();
  });

  it('loses no acknowledged record; acknowledgements wait while S3 is down; seals and WAL trim catch up by themselves', async () => {
    const pid = broker.proc.pid;
    const figures = () => broker.api<Figures>('GET', '/api/v1/broker');
    const details = () => broker.api<Details>('GET', `/api/v1/streams/${TOPIC}`);
    const loops = [new ProduceLoop(() => broker.kafka, 'idem', true), new ProduceLoop(() => broker.kafka, 'plain', false)];
    const acked = () => loops.reduce((n, l) => n + l.acked.size, 0);
    /** Waits until both producers got `n` more acknowledgements than they had at the call. */
    const progress = async (n: number, what: string, timeoutMs = 60_000) => {
      const from = loops.map((l) => l.acked.size);
      try {
        await eventually(() => loops.every((l, i) => l.acked.size >= from[i] + n), timeoutMs, what);
      } catch (err) {
        const state = loops.map((l, i) => `${from[i]} -> ${l.acked.size} acked, ${l.failures} failed sends (last: ${l.lastError})`);
        const warnings = broker.logs
          .filter((l) => l.level >= 40)
          .slice(-10)
          .map((l) => JSON.stringify(l));
        const exit = broker.proc.exitCode ?? broker.proc.signalCode;
        const died = exit === null ? '' : `\nthe broker exited (${exit}): ${broker.errorOutput}`;
        throw new Error(`${(err as Error).message}: ${state.join('; ')}\n${warnings.join('\n')}${died}`);
      }
    };
    let sealedBefore = 0;
    for (const l of loops) l.start();
    try {
      await progress(5 * BATCH, 'acknowledgements before the outages');

      // (a) PostgreSQL restarts (fast shutdown: every connection is cut) in the middle of the run.
      await svc.pg.restart();
      await progress(5 * BATCH, 'acknowledgements after PostgreSQL came back');
      const f1 = await figures();
      assert.ok(
        f1.storage.walFigures.errors + f1.storage.metastoreFigures.errors > 0,
        `the restart was felt by the broker: ${JSON.stringify({ wal: f1.storage.walFigures, meta: f1.storage.metastoreFigures })}`,
      );

      // (b) S3 goes away. Seals fail; the WAL keeps acknowledging until the unsealed tails reach the limit.
      sealedBefore = (await figures()).storage.log.sealedSegments;
      const ackedAtS3Stop = acked();
      await svc.s3.stop();
      await eventually(async () => (await figures()).storage.log.throttledAppends > 0, 60_000, 'acknowledgements held back (throttled)');
      // A seal fails once its S3 attempts have (2 × 2 s at most): on a slow machine the tails can reach the limit first.
      await eventually(async () => (await figures()).storage.log.failedSeals > 0, 30_000, 'seals failed while S3 was down');
      const f2 = await figures();
      assert.ok(acked() > ackedAtS3Stop, 'acknowledgements kept coming from the WAL while S3 was down');
      // Each producer has one request in flight at most: once the limit is reached, the tails stop growing
      // (beyond the batches already appended whose acknowledgements wait).
      const tails = (await details()).partitionDetails.reduce((n, p) => n + p.tailBytes, 0);
      assert.ok(tails >= MAX_UNSEALED, `the tails reached the limit (${tails} bytes)`);
      assert.ok(tails <= MAX_UNSEALED + 4 * BATCH * (RECORD_BYTES + 64), `the tails stay near the limit (${tails} bytes)`);
      assert.ok(f2.storage.walBytes >= MAX_UNSEALED, `the WAL holds the unsealed data (${f2.storage.walBytes} bytes)`);
      await broker.waitForLog((l) => l.msg.startsWith('segment flush failed'), 10_000);

      // S3 returns: the held acknowledgements are released, the producers go on.
      await svc.s3.start();
      await progress(5 * BATCH, 'acknowledgements after S3 came back');
    } finally {
      await Promise.all(loops.map((l) => l.stop()));
    }

    // With no more writes and nobody calling flush, every tail is sealed into S3 and the WAL trimmed.
    await eventually(
      async () => {
        const d = await details();
        return d.partitionDetails.every((p) => p.flushedOffset === p.highWatermark && p.tailBytes === 0);
      },
      60_000,
      'every partition sealed',
    );
    await eventually(async () => (await figures()).storage.walBytes === 0, 30_000, 'the WAL trimmed');
    const f3 = await figures();
    assert.ok(f3.storage.log.sealedSegments > sealedBefore, 'segments sealed after S3 came back');
    assert.equal(broker.proc.pid, pid);
    assert.equal(broker.proc.exitCode, null, 'the broker kept running');

    // Every acknowledged record, read from the beginning by kcat (from S3: nothing is in memory or in the WAL).
    const got = new Set<string>();
    for (const m of await kcatConsume(broker.kafka, TOPIC)) {
      const v = String(m.payload);
      got.add(v.slice(0, v.indexOf(':')));
    }
    const missing: string[] = [];
    for (const l of loops) for (const id of l.acked) if (!got.has(id)) missing.push(id);
    assert.deepEqual(missing.slice(0, 20), [], `${missing.length} acknowledged records missing of ${acked()}`);
    const f4 = await figures();
    assert.ok(f4.storage.log.objectReads > f3.storage.log.objectReads, 'the records were read back from the object store');
    const gets = f4.storage.objectFigures?.inner?.operations.get;
    assert.ok(gets !== undefined && gets.requests > 0, 'by GETs to S3');
    console.log(
      `outage run: ${acked()} records acknowledged (${loops.map((l) => `${l.acked.size} ${l.failures} failed sends`).join(', ')}), ` +
        `${got.size} distinct read back, ${f3.storage.log.sealedSegments} segments sealed (${f3.storage.log.failedSeals} failed seals), ` +
        `${f3.storage.log.throttledAppends} throttled appends`,
    );
  });
});
