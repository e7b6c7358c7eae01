/**
 * Cluster benchmarks (issue 17), on the test harness's cluster (test/helpers/cluster.ts: PostgreSQL, s3rver and
 * N `bin/flowmq --cluster` processes on this machine):
 *
 * - scaling: Kafka produce (acks=all, KafkaJS, 1 KiB records in batches, partitions spread over the brokers, each
 *   client going to the partition's leader) with 1, 2 and 3 brokers: records/s, send p50 / p99, and, since every
 *   broker shares the same two cores with PostgreSQL and the load generator, the scaling figure: CPU time (user +
 *   system from /proc/<pid>/stat) per message, per broker and summed. Throughput on one machine cannot grow with
 *   brokers; what spreads is the work per broker.
 * - forwarding: MQTT QoS 1 publishes captured by a one-partition stream, the client on the partition's owner vs on
 *   another broker (the publish is forwarded to the owner and acknowledged once durable there): publishes/s, ack
 *   p50 / p99, and CPU per message on both brokers.
 * - failover: an idempotent KafkaJS producer writes every partition continuously; the owner of partition 0 is killed
 *   with kill -9; the time until every partition it owned has acknowledged a write again, with the default lease
 *   (5 s) unless BENCH_CLUSTER_LEASE says otherwise; then every acknowledged record is checked to be there once.
 */
import kafkajsPkg from 'kafkajs';
import mqtt from 'mqtt';
import { startCluster, type TestCluster } from '../test/helpers/cluster.js';
import { kcatConsume } from '../test/e2e/harness.js';
import { percentiles, sleep, type Percentiles } from './util.js';

const { Kafka, logLevel } = kafkajsPkg;

export interface CpuPerBroker {
  broker: number;
  /** CPU ms the broker used during the measurement. */
  cpuMs: number;
  /** µs of that broker's CPU per message acknowledged by the cluster. */
  usPerMessage: number;
  /** The same without what the broker burns idle (heartbeats, reconciles, timers), measured before the load. */
  netUsPerMessage: number;
}

export interface ScalingResult {
  brokers: number;
  partitions: number;
  recordsPerSec: number;
  sendLatencyMs: Percentiles;
  errors: number;
  cpu: CpuPerBroker[];
  /** Sum over brokers, µs per message. */
  usPerMessageTotal: number;
  /** Largest single broker, µs per message (what one machine per broker would have to carry). */
  usPerMessageMax: number;
  /** The same two without idle CPU. */
  netUsPerMessageTotal: number;
  netUsPerMessageMax: number;
  /** CPU ms per second per broker before the load. */
  idleMsPerSec: Record<number, number>;
}

export interface ScalingOptions {
  seconds: number;
  warmupS: number;
  partitions: number;
  /** Concurrent senders (each one batch in flight). */
  senders: number;
  batch: number;
  recordBytes: number;
}

function cpuDeltas(c: TestCluster, before: Map<number, number>, messages: number, idle: Map<number, number>, seconds: number): CpuPerBroker[] {
  return c.running.map((b) => {
    const cpuMs = c.cpuMs(b.id) - (before.get(b.id) ?? 0);
    const net = Math.max(0, cpuMs - (idle.get(b.id) ?? 0) * seconds);
    return { broker: b.id, cpuMs, usPerMessage: messages > 0 ? (cpuMs * 1000) / messages : NaN, netUsPerMessage: messages > 0 ? (net * 1000) / messages : NaN };
  });
}

/** CPU ms per second each broker uses with no load (over 2 s). */
async function idleCpu(c: TestCluster): Promise<Map<number, number>> {
  const t0 = performance.now();
  const before = cpuNow(c);
  await sleep(2000);
  const s = (performance.now() - t0) / 1000;
  return new Map(c.running.map((b) => [b.id, (c.cpuMs(b.id) - before.get(b.id)!) / s]));
}

function cpuNow(c: TestCluster): Map<number, number> {
  return new Map(c.running.map((b) => [b.id, c.cpuMs(b.id)]));
}

async function createTopic(c: TestCluster, topic: string, partitions: number): Promise<void> {
  const admin = new Kafka({ brokers: c.bootstrap, clientId: 'bench-admin', logLevel: logLevel.NOTHING, retry: { retries: 10 } }).admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  await c.waitSettled({ min: { partition: partitions } });
}

/** Produce throughput with `brokers` brokers. */
export async function clusterScaling(brokers: number, o: ScalingOptions): Promise<ScalingResult> {
  const c = await startCluster({ brokers, haproxy: false, durable: true });
  try {
    const topic = 'bench.scale';
    await createTopic(c, topic, o.partitions);
    const idle = await idleCpu(c);
    const producer = new Kafka({ brokers: c.bootstrap, clientId: 'bench-scale', logLevel: logLevel.NOTHING, retry: { retries: 5 } }).producer();
    await producer.connect();
    const value = Buffer.alloc(o.recordBytes, 120);
    let acked = 0;
    let errors = 0;
    let measuring = false;
    const lat: number[] = [];
    let stop = false;
    let next = 0;
    const sender = async () => {
      while (!stop) {
        const p = next++ % o.partitions;
        const t = performance.now();
        try {
          await producer.send({ topic, acks: -1, messages: Array.from({ length: o.batch }, () => ({ partition: p, value })) });
          if (measuring) {
            acked += o.batch;
            lat.push(performance.now() - t);
          }
        } catch {
          if (measuring) errors++;
        }
      }
    };
    const running = Array.from({ length: o.senders }, sender);
    await sleep(o.warmupS * 1000);
    const cpu0 = cpuNow(c);
    const t0 = performance.now();
    measuring = true;
    await sleep(o.seconds * 1000);
    measuring = false;
    const elapsed = (performance.now() - t0) / 1000;
    const messages = acked;
    const cpu = cpuDeltas(c, cpu0, messages, idle, elapsed);
    stop = true;
    await Promise.all(running);
    await producer.disconnect();
    return {
      brokers,
      partitions: o.partitions,
      recordsPerSec: messages / elapsed,
      sendLatencyMs: percentiles(lat),
      errors,
      cpu,
      usPerMessageTotal: cpu.reduce((n, x) => n + x.usPerMessage, 0),
      usPerMessageMax: Math.max(...cpu.map((x) => x.usPerMessage)),
      netUsPerMessageTotal: cpu.reduce((n, x) => n + x.netUsPerMessage, 0),
      netUsPerMessageMax: Math.max(...cpu.map((x) => x.netUsPerMessage)),
      idleMsPerSec: Object.fromEntries(idle),
    };
  } finally {
    await c.close();
  }
}

export interface ForwardingSide {
  /** Where the publishing client is connected. */
  client: 'owner' | 'non-owner';
  broker: number;
  publishesPerSec: number;
  ackMs: Percentiles;
  cpu: CpuPerBroker[];
}

export interface ForwardingResult {
  owner: number;
  sides: ForwardingSide[];
}

/** MQTT QoS 1 publishes into a one-partition stream: the client on its owner, then on another broker. */
export async function clusterForwarding(o: { seconds: number; warmupS: number; window: number; payloadBytes: number }): Promise<ForwardingResult> {
  const c = await startCluster({ brokers: 2, haproxy: false, durable: true });
  try {
    const topic = 'bench.fwd';
    await createTopic(c, topic, 1);
    await c.waitCatalog({ streams: [topic] });
    const owner = (await c.ownerOf('partition', `${topic}/0`))!;
    const other = c.running.find((b) => b.id !== owner)!.id;
    const payload = Buffer.alloc(o.payloadBytes, 120);
    const idle = await idleCpu(c);
    const sides: ForwardingSide[] = [];
    // Owner, non-owner, owner again: the repeat shows how much of a difference is the machine's noise.
    for (const [client, broker] of [
      ['owner', owner],
      ['non-owner', other],
      ['owner', owner],
    ] as const) {
      const m = await mqtt.connectAsync(c.broker(broker).mqttUrl, { clientId: `bench-fwd-${client}`, protocolVersion: 5, reconnectPeriod: 0 });
      let stop = false;
      let measuring = false;
      let acked = 0;
      const lat: number[] = [];
      const worker = async () => {
        while (!stop) {
          const t = performance.now();
          // The unified topic of the stream bench.fwd is bench/fwd.
          await m.publishAsync('bench/fwd', payload, { qos: 1 });
          if (measuring) {
            acked++;
            lat.push(performance.now() - t);
          }
        }
      };
      const running = Array.from({ length: o.window }, worker);
      await sleep(o.warmupS * 1000);
      const cpu0 = cpuNow(c);
      const t0 = performance.now();
      measuring = true;
      await sleep(o.seconds * 1000);
      measuring = false;
      const elapsed = (performance.now() - t0) / 1000;
      const cpu = cpuDeltas(c, cpu0, acked, idle, elapsed);
      stop = true;
      await Promise.all(running);
      await m.endAsync();
      sides.push({ client, broker, publishesPerSec: acked / elapsed, ackMs: percentiles(lat), cpu });
    }
    return { owner, sides };
  } finally {
    await c.close();
  }
}

export interface FailoverResult {
  leaseMs: number;
  victim: number;
  victimPartitions: number[];
  /** kill -9 → every partition of the victim acknowledged a write again. */
  failoverMs: number | null;
  /** Per victim partition, ms from the kill to its first acknowledgement after it. */
  perPartitionMs: Record<number, number | null>;
  acked: number;
  failedSends: number;
  lost: number;
  duplicates: number;
  outOfOrder: number;
}

/** kill -9 of a partition owner under an idempotent producer writing every partition. */
export async function clusterFailover(o: { leaseMs: number; partitions: number; afterS: number }): Promise<FailoverResult> {
  const c = await startCluster({ brokers: 3, haproxy: false, leaseMs: o.leaseMs });
  try {
    const topic = 'bench.failover';
    await createTopic(c, topic, o.partitions);
    const rows = (await c.owners('partition')).owners.filter((r) => r.name.startsWith(`${topic}/`));
    const ownerOf = new Map(rows.map((r) => [Number(r.name.slice(topic.length + 1)), r.owner!]));
    const victim = ownerOf.get(0)!;
    const victimPartitions = [...ownerOf].filter(([, b]) => b === victim).map(([p]) => p);
    const producer = new Kafka({
      brokers: c.bootstrap,
      clientId: 'bench-failover',
      logLevel: logLevel.NOTHING,
      requestTimeout: 15_000,
      retry: { retries: 60, initialRetryTime: 100, maxRetryTime: 1000 },
    }).producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const acked = new Map<number, number[]>(Array.from({ length: o.partitions }, (_, p) => [p, []]));
    let failedSends = 0;
    let killedAt = 0;
    const firstAfter = new Map<number, number>();
    let stop = false;
    const loop = async (p: number) => {
      let seq = 0;
      while (!stop) {
        const s = seq++;
        try {
          await producer.send({ topic, acks: -1, messages: [{ partition: p, value: `${p}:${s}` }] });
          acked.get(p)!.push(s);
          if (killedAt > 0 && !firstAfter.has(p)) firstAfter.set(p, Date.now() - killedAt);
        } catch {
          failedSends++;
        }
      }
    };
    const loops = Array.from({ length: o.partitions }, (_, p) => loop(p));
    await sleep(2000);
    killedAt = Date.now();
    await c.kill(victim);
    const deadline = Date.now() + Math.max(o.afterS * 1000, 4 * o.leaseMs + 10_000);
    while (Date.now() < deadline && !victimPartitions.every((p) => firstAfter.has(p))) await sleep(50);
    await sleep(o.afterS * 1000);
    stop = true;
    await Promise.all(loops);
    await producer.disconnect();

    let lost = 0;
    let duplicates = 0;
    let outOfOrder = 0;
    const reader = c.running[0];
    for (let p = 0; p < o.partitions; p++) {
      const seqs = (await kcatConsume(reader.kafka, topic, ['-p', String(p)])).map((m) => Number((m.payload ?? '').split(':')[1]));
      const have = new Set(seqs);
      duplicates += seqs.length - have.size;
      for (let i = 1; i < seqs.length; i++) if (seqs[i] <= seqs[i - 1]) outOfOrder++;
      lost += acked.get(p)!.filter((s) => !have.has(s)).length;
    }
    const perPartitionMs = Object.fromEntries(victimPartitions.map((p) => [p, firstAfter.get(p) ?? null]));
    const all = victimPartitions.map((p) => firstAfter.get(p));
    return {
      leaseMs: o.leaseMs,
      victim,
      victimPartitions,
      failoverMs: all.every((x) => x !== undefined) ? Math.max(...(all as number[])) : null,
      perPartitionMs,
      acked: [...acked.values()].reduce((n, l) => n + l.length, 0),
      failedSends,
      lost,
      duplicates,
      outOfOrder,
    };
  } finally {
    await c.close();
  }
}

// `node dist/bench/cluster.js [scaling|forwarding|failover]`: one part alone, figures as JSON.
if (process.argv[1] && /bench[/\\]cluster\.js$/.test(process.argv[1])) {
  const what = process.argv[2] ?? 'all';
  const seconds = Number(process.env.BENCH_SECONDS ?? 5);
  const warmupS = Number(process.env.BENCH_WARMUP ?? 1);
  void (async () => {
    if (what === 'all' || what === 'scaling') {
      for (const n of [1, 2, 3])
        console.log(JSON.stringify(await clusterScaling(n, { seconds, warmupS, partitions: 6, senders: 12, batch: 50, recordBytes: 1024 })));
    }
    if (what === 'all' || what === 'forwarding') console.log(JSON.stringify(await clusterForwarding({ seconds, warmupS, window: 50, payloadBytes: 256 })));
    if (what === 'all' || what === 'failover')
      console.log(JSON.stringify(await clusterFailover({ leaseMs: Number(process.env.BENCH_CLUSTER_LEASE ?? 5000), partitions: 6, afterS: 2 })));
  })().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
