/**
 * `npm run crash-test -- --scenario eos`: an exactly-once consume-transform-produce pipeline (KafkaJS
 * transactions with sendOffsets, KIP-98) while a real bin/flowmq is SIGKILLed several times and restarted on the
 * same data directory. The input topic is filled first; the pipeline copies each record to the output topic and
 * commits its consumer offsets in the same transaction; after any failure it tears down its consumer and
 * producer and starts over (InitProducerId on the same transactional.id fences and aborts what was open). At the
 * end a read_committed consumer (kcat, librdkafka) reads the output: every input record must be there exactly once.
 */
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import kafkajs from 'kafkajs';
import { kcatConsume, sleep } from '../../test/e2e/harness.js';
import { prng } from '../../test/helpers/prng.js';
import { api, Broker, freePort, type Ports } from './crash.js';

const { Kafka, logLevel } = kafkajs;
const IN = 'eos-in';
const OUT = 'eos-out';
const GROUP = 'eos-pipe';

export interface EosOptions {
  records: number;
  kills: number;
  seed?: number;
  keep?: boolean;
  log?: (line: string) => void;
}

export interface EosSummary {
  ok: boolean;
  records: number;
  kills: number;
  restarts: number;
  committedTxns: number;
  found: number;
  lost: number;
  duplicates: number;
  seconds: number;
  dataDir: string;
}

export async function runEosCrash(opts: EosOptions): Promise<EosSummary> {
  const log = opts.log ?? (() => undefined);
  const rnd = prng(opts.seed ?? 1);
  const started = Date.now();
  const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-eos-'));
  const logFile = createWriteStream(`${dataDir}.broker.log`);
  const ports: Ports = { mqtt: await freePort(), kafka: await freePort(), amqp: await freePort(), nats: await freePort(), http: await freePort() };
  // KafkaJS stops a crashed consumer from inside (consumer.stop leaving a group the restarted broker no longer
  // knows) and leaves that rejection unhandled: the pipeline restarts anyway, so count such errors and go on.
  let kafkajsUnhandled = 0;
  const onUnhandled = (e: unknown): void => {
    if (e instanceof Error && e.name.startsWith('KafkaJS')) kafkajsUnhandled++;
    else throw e;
  };
  process.on('unhandledRejection', onUnhandled);
  let broker = new Broker(dataDir, ports, logFile);
  await broker.ready(ports.http);
  await api(ports.http, 'POST', '/api/v1/streams', { name: IN, partitions: 3 });
  await api(ports.http, 'POST', '/api/v1/streams', { name: OUT, partitions: 3 });
  const kafka = new Kafka({
    clientId: 'eos',
    brokers: [`127.0.0.1:${ports.kafka}`],
    logLevel: logLevel.NOTHING,
    retry: { retries: 40, initialRetryTime: 100, maxRetryTime: 1000 },
  });
  const filler = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await filler.connect();
  for (let i = 0; i < opts.records; i += 100) {
    const ns = Array.from({ length: Math.min(100, opts.records - i) }, (_, j) => i + j);
    await filler.send({ topic: IN, acks: -1, messages: ns.map((n) => ({ key: `k${n % 17}`, value: String(n) })) });
  }
  await filler.disconnect();
  log(`eos: ${opts.records} records in ${IN}`);

  let restarts = 0;
  let committedTxns = 0;
  let stop = false;
  const admin = kafka.admin();
  const pipeline = (async () => {
    while (!stop) {
      const producer = kafka.producer({ transactionalId: 'eos-pipe-tx', idempotent: true, maxInFlightRequests: 1, transactionTimeout: 10_000 });
      const consumer = kafka.consumer({
        groupId: GROUP,
        readUncommitted: false,
        sessionTimeout: 10_000,
        heartbeatInterval: 1000,
        // Small fetches: many small transactions, so that kills land between and inside them.
        maxBytesPerPartition: 1024,
      });
      let failed: (e: unknown) => void = () => undefined;
      const failure = new Promise<unknown>((r) => (failed = r));
      consumer.on(consumer.events.CRASH, (e) => failed(e.payload.error));
      try {
        await producer.connect();
        await consumer.connect();
        await consumer.subscribe({ topic: IN, fromBeginning: true });
        await consumer.run({
          autoCommit: false,
          eachBatchAutoResolve: false,
          eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
            if (batch.messages.length === 0) return;
            const txn = await producer.transaction();
            try {
              await txn.send({ topic: OUT, messages: batch.messages.map((m) => ({ key: m.key, value: m.value })) });
              const last = batch.messages[batch.messages.length - 1]!;
              await txn.sendOffsets({
                consumerGroupId: GROUP,
                topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: String(BigInt(last.offset) + 1n) }] }],
              });
              await txn.commit();
              committedTxns++;
              // KafkaJS fetches again from the last resolved offset: resolve only what the commit covered.
              resolveOffset(last.offset);
              await heartbeat();
            } catch (e) {
              await txn.abort().catch(() => undefined);
              failed(e);
              throw e;
            }
          },
        });
        while (!stop) {
          const r = await Promise.race([failure.then(() => 'failed'), sleep(200).then(() => 'tick')]);
          if (r === 'failed') break;
        }
      } catch {
        // fall through to the restart
      }
      await consumer.disconnect().catch(() => undefined);
      await producer.disconnect().catch(() => undefined);
      if (!stop) {
        restarts++;
        await sleep(200);
      }
    }
  })();

  // The kills begin once the pipeline has committed: KafkaJS takes a few seconds to join its group.
  // Each kill waits for a commit after the previous restart, so that kills land while transactions flow.
  for (let k = 0; k < opts.kills; k++) {
    const before = committedTxns;
    const wait = Date.now() + 60_000;
    while (committedTxns === before && Date.now() < wait) await sleep(20);
    await sleep(100 + Math.floor(rnd() * 1500));
    await broker.kill();
    log(`eos: kill ${k + 1}/${opts.kills} after ${committedTxns} committed transactions`);
    broker = new Broker(dataDir, ports, logFile);
    await broker.ready(ports.http);
  }

  // Done when the group's committed offsets reach the end of every input partition.
  await admin.connect();
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      const ends = await admin.fetchTopicOffsets(IN);
      const [got] = await admin.fetchOffsets({ groupId: GROUP, topics: [IN] });
      const done = ends.every((e) => got!.partitions.find((p) => p.partition === e.partition)?.offset === e.high);
      if (done) break;
    } catch {
      // retry
    }
    if (Date.now() > deadline) break;
    await sleep(500);
  }
  stop = true;
  await pipeline;
  await admin.disconnect().catch(() => undefined);

  const out = await kcatConsume(`127.0.0.1:${ports.kafka}`, OUT, ['-X', 'isolation.level=read_committed']);
  const counts = new Map<number, number>();
  for (const m of out) counts.set(Number(m.payload), (counts.get(Number(m.payload)) ?? 0) + 1);
  let found = 0;
  let lost = 0;
  for (let n = 0; n < opts.records; n++) (counts.get(n) ?? 0) > 0 ? found++ : lost++;
  let duplicates = 0;
  for (const c of counts.values()) if (c > 1) duplicates += c - 1;
  await broker.kill();
  process.off('unhandledRejection', onUnhandled);
  if (kafkajsUnhandled > 0) log(`eos: ${kafkajsUnhandled} unhandled KafkaJS rejections ignored`);
  logFile.end();
  if (!opts.keep) rmSync(dataDir, { recursive: true, force: true });
  const extra = out.length - found - duplicates;
  return {
    ok: lost === 0 && duplicates === 0 && extra === 0,
    records: opts.records,
    kills: opts.kills,
    restarts,
    committedTxns,
    found,
    lost,
    duplicates,
    seconds: (Date.now() - started) / 1000,
    dataDir,
  };
}

export function formatEosSummary(s: EosSummary): string {
  return (
    `eos pipeline: ${s.records} input records, ${s.kills} kill -9, ${s.restarts} pipeline restarts, ${s.committedTxns} committed transactions, ` +
    `${s.seconds.toFixed(1)} s\n  read_committed output: found ${s.found}, lost ${s.lost}, duplicates ${s.duplicates} -> ${s.ok ? 'OK' : 'FAIL'}`
  );
}
