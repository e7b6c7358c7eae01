/**
 * `npm run bench [-- SELECTION...]`: side-by-side benchmarks of the real `bin/flowmq` process.
 *
 * MQTT scenarios run against FlowMQ and Mosquitto (when installed) in the same run, with the same load
 * generator, each on a freshly started broker; the order of the two brokers alternates from one scenario to
 * the next. Kafka scenarios are reported next to the machine's own fsync'd sequential write bandwidth, measured
 * in the same run on the filesystem the broker writes to.
 *
 * SELECTION: `mqtt`, `kafka`, `storage`, `amqp`, `nats`, `cluster`, `idle`, or scenario names (`npm run bench -- --list`); default: everything.
 * Storage scenarios run each measurement with embedded storage, with PostgreSQL + S3, and (produce and latency) with
 * the PostgreSQL WAL sharded over two servers (shared-storage.ts).
 * AMQP scenarios run against FlowMQ and a private RabbitMQ node (rabbitmq.ts, Debian's rabbitmq-server) with the
 * same amqplib load generator (amqp.ts).
 * NATS scenarios run against FlowMQ and a private nats-server (nats-server.ts, Debian's nats-server) with the same
 * raw-socket load generator (nats.ts).
 * Results: one markdown table per group on stdout, and bench/results/latest.json.
 *
 * Environment (all optional): BENCH_SECONDS (5) measured seconds per scenario, BENCH_WARMUP (1) seconds of
 * warm-up before it, BENCH_DATA_DIR (os.tmpdir()) where brokers keep their data and the disk is probed,
 * BENCH_MOSQUITTO (path of the mosquitto binary), and the scenario sizes listed in docs/benchmarks.md.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import {
  cleanupAll,
  createStream,
  mosquittoBinary,
  mosquittoVersion,
  MQTT_LIMITS,
  nofile,
  removeDir,
  ROOT,
  rssKiB,
  startFlowmq,
  startMosquitto,
  tempDir,
  type Broker,
} from './brokers.js';
import { diskFsyncBandwidth, type DiskResult } from './disk.js';
import { kafkaLatency, kafkaProduceBatches, kafkaProduceThroughput, kafkaReplay, type LatencyResult, type ProduceResult, type ReplayResult } from './kafka.js';
import { disklessStorageArgs, postgresCpuMs, postgresIdleMsPerSec, shardedStorageArgs, sharedStorageArgs } from './shared-storage.js';
import { AuthFlood, SaslProducer } from './auth-flood.js';
import { runMqttLoad, type MqttLoadOptions, type MqttLoadResult } from './mqtt.js';
import { measureIdle, startFloor, type IdleProtocol, type IdleResult } from './idle.js';
import { floodCell, heapCell, runFloods, type FloodOptions, type FloodResult, type FloodTarget, type ProcessMemory } from './flood.js';
import { measureCompaction } from './compaction.js';
import { defaultQueueStoreOptions, levelCell, queueStoreEmbedded, queueStorePostgres, type QueueStoreLevel } from './queue-store.js';
import { runAmqpFairness, runAmqpLoad, type AmqpFairnessOptions, type AmqpFairnessResult, type AmqpLoadOptions, type AmqpLoadResult } from './amqp.js';
import { rabbitmqBinDir, rabbitmqVersion, startRabbitmq, waitAmqp } from './rabbitmq.js';
import { runNatsPubSub, runNatsRequest, type CpuUse, type NatsPubSubResult, type NatsRequestResult } from './nats.js';
import { NATS_LIMITS, natsServerBinary, natsServerVersion, startNatsServer, waitNatsInfo } from './nats-server.js';
import { flowmqRestarts, natsServerRestarts, type StartupResult } from './startup.js';
import { fmt, freePort, nowS, ratio, roundDeep, sleep, table } from './util.js';
import { clusterFailover, clusterForwarding, clusterScaling, type ForwardingResult, type FailoverResult, type ScalingResult } from './cluster.js';
import { histogramQuantile, type HistogramSnapshot } from '../src/core/index.js';

const num = (name: string, dflt: number, integer = false): number => {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || (integer && (!Number.isInteger(n) || n < 1))) {
    throw new Error(`${name} must be a ${integer ? 'positive integer' : 'non-negative number'}, not ${JSON.stringify(v)}`);
  }
  return n;
};
const int = (name: string, dflt: number) => num(name, dflt, true);

const CFG = {
  seconds: num('BENCH_SECONDS', 5),
  warmupS: num('BENCH_WARMUP', 1),
  payloadBytes: int('BENCH_MQTT_PAYLOAD', 64),
  /** QoS 1 publishers: unacknowledged PUBLISHes each. */
  window: int('BENCH_MQTT_WINDOW', 100),
  /**
   * Messages in flight end to end towards one subscriber (shared among the publishers that feed it): below
   * the 1000-message per-client queue both brokers are configured with, so neither is driven into dropping.
   */
  ahead: int('BENCH_MQTT_AHEAD', 800),
  /** Fan-out: messages the publisher may be ahead of its slowest subscriber. */
  fanoutAhead: int('BENCH_FANOUT_AHEAD', 100),
  faninPublishers: int('BENCH_FANIN_PUBLISHERS', 20),
  fanoutSubscribers: int('BENCH_FANOUT_SUBSCRIBERS', 1000),
  sharedMembers: int('BENCH_SHARED_MEMBERS', 50),
  idleConnections: int('BENCH_IDLE_CONNECTIONS', 10_000),
  /** Connection floods (mqtt-flood-memory, kafka-flood-memory): connections per flood, floods in a row. */
  floodConnections: int('BENCH_FLOOD_CONNECTIONS', 7_000),
  floods: int('BENCH_FLOODS', 3),
  /** Share of a flood's connections that leave a request half sent. */
  floodHalfShare: num('BENCH_FLOOD_HALF', 0.1),
  /** What a Kafka half request's size prefix announces (16 MiB: the largest pooled frame). */
  floodKafkaPrefixBytes: int('BENCH_FLOOD_KAFKA_PREFIX', 16 * 1024 * 1024),
  /** Seconds after a flood has closed before "after" is sampled (FlowMQ looks for a flood's garbage every 10 s). */
  floodSettleS: num('BENCH_FLOOD_SETTLE', 12),
  kafkaPartitions: int('BENCH_KAFKA_PARTITIONS', 4),
  kafkaConnections: int('BENCH_KAFKA_CONNECTIONS', 2),
  kafkaInflight: int('BENCH_KAFKA_INFLIGHT', 5),
  kafkaRecordBytes: 1024,
  /** ~1 MB per partition request, librdkafka's default batch.size / message.max.bytes. */
  kafkaRecordsPerBatch: int('BENCH_KAFKA_BATCH_RECORDS', 960),
  kafkaLingerMs: int('BENCH_KAFKA_LINGER_MS', 5),
  diskSeconds: num('BENCH_DISK_SECONDS', 3),
  /**
   * Warm-up of the produce throughput run: the broker takes up to --max-unsealed-bytes (256 MiB) ahead of its
   * segment writes before acknowledgements wait for them, so the first seconds run faster than the disk can
   * sustain; the measurement starts once that allowance is used up.
   */
  kafkaProduceWarmupS: num('BENCH_KAFKA_PRODUCE_WARMUP', 4),
  /**
   * Minimum warm-up of the latency runs, which then go on warming up until the producers have kept up for 0.5 s (at
   * most 10 s more): a fresh broker answers its first produce requests slowly (files to create, code not yet
   * compiled), and the backlog they leave took up to ~2 s to clear at half of peak with a consumer running.
   */
  kafkaLatencyWarmupS: num('BENCH_KAFKA_LATENCY_WARMUP', 2),
  /** kafka-auth-flood: the authenticated producer's rate, and the wrong-password flood's sockets and attempts/s. */
  authProduceRate: int('BENCH_AUTH_PRODUCE_RATE', 50),
  authFloodSockets: int('BENCH_AUTH_FLOOD_SOCKETS', 300),
  authFloodRate: int('BENCH_AUTH_FLOOD_RATE', 80),
  /** storage-replay: MB of 1 KiB records laid down, and the segment size they are sealed in (--segment-bytes). */
  replayMb: int('BENCH_REPLAY_MB', 512),
  replaySegment: process.env.BENCH_REPLAY_SEGMENT || '8MiB',
  /** storage-replay: the consumers' partition max bytes (one Fetch outstanding per partition). */
  replayFetchBytes: int('BENCH_REPLAY_FETCH_BYTES', 16 * 1024 * 1024),
  /** Storage configurations the storage scenarios run (comma-separated: embedded, shared, sharded, diskless). */
  storageConfigs: (process.env.BENCH_STORAGE_CONFIGS || 'embedded,shared,sharded,diskless').split(',').map((c) => c.trim()),
  /** AMQP scenarios: their own measured seconds and warm-up (a queue's steady state takes longer than a topic's). */
  amqpSeconds: num('BENCH_AMQP_SECONDS', 10),
  amqpWarmupS: num('BENCH_AMQP_WARMUP', 3),
  amqpPayloadBytes: int('BENCH_AMQP_PAYLOAD', 1024),
  /** Unconfirmed publishes per publisher (persistent scenario). */
  amqpWindow: int('BENCH_AMQP_WINDOW', 256),
  /** basic.qos prefetch count per consumer (persistent scenario: manual acks). */
  amqpPrefetch: int('BENCH_AMQP_PREFETCH', 200),
  /** Messages the publishers may be ahead of the consumers (0: no bound). */
  amqpAhead: num('BENCH_AMQP_AHEAD', 5_000),
  amqpPublishers: int('BENCH_AMQP_PUBLISHERS', 1),
  amqpConsumers: int('BENCH_AMQP_CONSUMERS', 1),
  /** amqp-fairness: the measured client's unconfirmed publishes, and seconds alone before the flooder starts. */
  amqpFairWindow: int('BENCH_AMQP_FAIR_WINDOW', 8),
  amqpFairAloneS: num('BENCH_AMQP_FAIR_ALONE', 5),
  /** amqp-fairness: the flooder's delivery mode (`persistent` or `transient`). */
  amqpFloodMode: process.env.BENCH_AMQP_FLOOD_MODE || 'persistent',
  /** AMQP scenarios: FlowMQ's storage, `embedded` or `postgres` (PostgreSQL metastore, WAL and queue store, S3 objects). */
  amqpStorage: process.env.BENCH_AMQP_STORAGE || 'embedded',
  /** The transient scenario's queue: `transient` (not durable) or `durable`. */
  amqpTransientQueue: process.env.BENCH_AMQP_TRANSIENT_QUEUE || 'transient',
  /** NATS scenarios: short on purpose (nats-server moves millions of messages a second). */
  natsSeconds: num('BENCH_NATS_SECONDS', 3),
  natsWarmupS: num('BENCH_NATS_WARMUP', 1),
  /** Frame bytes the publisher may be ahead of its slowest subscriber (both brokers close a subscriber at 64 MiB pending). */
  natsAheadBytes: int('BENCH_NATS_AHEAD_BYTES', 8 * 1024 * 1024),
  natsFanout: int('BENCH_NATS_FANOUT', 4),
  natsQueueMembers: int('BENCH_NATS_QUEUE_MEMBERS', 3),
  natsQueuePayloadBytes: int('BENCH_NATS_QUEUE_PAYLOAD', 16),
  natsRequestPayloadBytes: int('BENCH_NATS_REQUEST_PAYLOAD', 16),
  /** Requests outstanding at once in nats-request-pipelined (nats-request keeps one). */
  natsRequestInflight: int('BENCH_NATS_REQUEST_INFLIGHT', 32),
  /** Cluster failover scenario: the membership lease (the broker's default, 5 s: the issue's target is for defaults). */
  clusterLeaseMs: int('BENCH_CLUSTER_LEASE', 5000),
};

// ------------------------------------------------------------------ results

type Group = 'mqtt' | 'kafka' | 'storage' | 'amqp' | 'nats' | 'cluster' | 'idle';

interface Row {
  group: Group;
  scenario: string;
  title: string;
  flowmq: string;
  peer: string;
  ratio: string;
  /** Cells between `peer` and `ratio` (the storage group's sharded configuration). */
  extra?: string[];
  data: Record<string, unknown>;
}

const rows: Row[] = [];

/** The broker's produce-latency histogram (GET /api/v1/broker), to diff around a measurement. */
async function produceHistogram(httpPort: number): Promise<HistogramSnapshot> {
  const res = await fetch(`http://127.0.0.1:${httpPort}/api/v1/broker`);
  const body = (await res.json()) as { kafka?: { produceLatency?: HistogramSnapshot } };
  if (!body.kafka?.produceLatency) throw new Error('the broker reports no produce latency histogram');
  return body.kafka.produceLatency;
}

function errText(e: unknown): string {
  return e instanceof Error ? e.message.split('\n')[0] : String(e);
}

// ------------------------------------------------------------------ MQTT scenarios

const MOSQUITTO = mosquittoBinary();
let pairIndex = 0;

type Outcome<T> = { ok: true; value: T } | { ok: false; error: string };

/** Runs `fn` once against a fresh FlowMQ and once against a fresh Mosquitto, alternating which goes first. */
async function pair<T>(fn: (b: Broker) => Promise<T>): Promise<{ flowmq: Outcome<T>; mosquitto: Outcome<T> | null }> {
  const kinds: ('flowmq' | 'mosquitto')[] = pairIndex++ % 2 === 0 ? ['flowmq', 'mosquitto'] : ['mosquitto', 'flowmq'];
  const out: { flowmq?: Outcome<T>; mosquitto?: Outcome<T> | null } = { mosquitto: null };
  for (const kind of kinds) {
    if (kind === 'mosquitto' && !MOSQUITTO) continue;
    let b: Broker | null = null;
    try {
      b = kind === 'flowmq' ? await startFlowmq() : await startMosquitto(MOSQUITTO!);
      out[kind] = { ok: true, value: await fn(b) };
    } catch (e) {
      out[kind] = { ok: false, error: errText(e) };
      console.error(`  ${kind}: ${errText(e)}`);
    } finally {
      await b?.stop();
    }
  }
  return { flowmq: out.flowmq!, mosquitto: out.mosquitto ?? null };
}

function mqttCell(r: MqttLoadResult): string {
  const notes: string[] = [];
  if (r.lostPct >= 0.05) notes.push(`${fmt(r.lostPct, 1)}% undelivered`);
  if (r.shared) notes.push(r.shared.exactlyOnce ? 'each exactly once' : `${fmt(r.shared.missing)} missing, ${fmt(r.shared.duplicated)} duplicated`);
  if (r.disconnects > 0) notes.push(`${r.disconnects} disconnects`);
  return `${fmt(r.deliveriesPerSec)}/s${notes.length ? ` (${notes.join(', ')})` : ''}`;
}

function mqttScenario(name: string, title: string, opts: Omit<MqttLoadOptions, 'warmupS' | 'seconds' | 'payloadBytes' | 'window'>) {
  return {
    name,
    group: 'mqtt' as const,
    title,
    run: async () => {
      const o: MqttLoadOptions = { ...opts, warmupS: CFG.warmupS, seconds: CFG.seconds, payloadBytes: CFG.payloadBytes, window: CFG.window };
      const r = await pair((b) => runMqttLoad(b.mqttPort, o));
      const f = r.flowmq;
      const m = r.mosquitto;
      rows.push({
        group: 'mqtt',
        scenario: name,
        title,
        flowmq: f.ok ? mqttCell(f.value) : `error: ${f.error}`,
        peer: !m ? 'mosquitto not installed' : m.ok ? mqttCell(m.value) : `error: ${m.error}`,
        ratio: f.ok && m?.ok ? ratio(f.value.deliveriesPerSec, m.value.deliveriesPerSec) : '-',
        data: { options: o, flowmq: f, mosquitto: m },
      });
    },
  };
}

const perSubscriber = (publishers: number) => Math.max(1, Math.floor(CFG.ahead / publishers));

// ------------------------------------------------------------------ connection floods

function floodOptions(): FloodOptions {
  return {
    connections: CFG.floodConnections,
    floods: CFG.floods,
    halfShare: Math.min(1, CFG.floodHalfShare),
    kafkaPrefixBytes: CFG.floodKafkaPrefixBytes,
    settleS: CFG.floodSettleS,
    concurrency: 200,
  };
}

/** A broker as a flood target: FlowMQ also reports its heap and its own count of open connections. */
function floodTarget(b: Broker, protocol: 'mqtt' | 'kafka'): FloodTarget {
  if (b.kind !== 'flowmq') return { pid: b.pid, port: b.mqttPort };
  const info = async () => {
    const res = await fetch(`http://127.0.0.1:${b.httpPort}/api/v1/broker`);
    return (await res.json()) as { process: ProcessMemory; listeners: Record<string, { connections: number }> };
  };
  return {
    pid: b.pid,
    port: protocol === 'mqtt' ? b.mqttPort : b.kafkaPort,
    memory: async () => (await info()).process,
    connections: async () => (await info()).listeners[protocol]?.connections ?? 0,
  };
}

/** RSS (MiB) a broker still held after its last flood, over what it had before the first. */
const heldMiB = (r: FloodResult) => (r.rounds[r.rounds.length - 1].after.rssKiB - r.rounds[0].before.rssKiB) / 1024;

const floodTitle = (protocol: string) => {
  const o = floodOptions();
  const half = protocol === 'MQTT' ? 'half a 64 KiB PUBLISH' : `a size prefix of ${fmt(o.kafkaPrefixBytes / 1048576, 0)} MiB and 12 bytes`;
  return `${o.floods} floods of ${fmt(o.connections)} ${protocol} connections (${fmt(o.halfShare * 100, 0)}% then send ${half}), each opened and closed: broker VmRSS before → peak → ${o.settleS} s after closing`;
};

// ------------------------------------------------------------------ Kafka scenarios

let disk: DiskResult | null = null;
let peak: ProduceResult | null = null;

async function withFlowmq<T>(fn: (b: Broker) => Promise<T>, args: readonly string[] = []): Promise<T> {
  const b = await startFlowmq(args);
  try {
    return await fn(b);
  } finally {
    await b.stop();
  }
}

async function measureDisk(): Promise<DiskResult> {
  if (!disk) {
    const d = tempDir('flowmq-bench-disk-');
    try {
      disk = await diskFsyncBandwidth(d, CFG.diskSeconds);
    } finally {
      removeDir(d);
    }
    rows.push({
      group: 'kafka',
      scenario: 'kafka-disk',
      title: `disk: sequential 1 MiB writes + fdatasync each, in the broker's data filesystem, the faster of buffered and O_DIRECT (MB/s)`,
      flowmq: '-',
      peer: `${fmt(disk.mbPerSec, 1)} MB/s (buffered ${fmt(disk.buffered.mbPerSec, 1)}, direct ${disk.direct ? fmt(disk.direct.mbPerSec, 1) : 'n/a'})`,
      ratio: '-',
      data: { disk },
    });
  }
  return disk;
}

function produceOptions(seconds: number) {
  return {
    topic: 'bench-produce',
    partitions: CFG.kafkaPartitions,
    connections: CFG.kafkaConnections,
    inflight: CFG.kafkaInflight,
    recordsPerBatch: CFG.kafkaRecordsPerBatch,
    recordBytes: CFG.kafkaRecordBytes,
    warmupS: CFG.kafkaProduceWarmupS,
    seconds,
  };
}

async function runProduce(
  seconds: number,
  args: readonly string[] = [],
  after?: (b: Broker) => Promise<void>,
  before?: (b: Broker) => Promise<void>,
): Promise<ProduceResult> {
  const o = produceOptions(seconds);
  return withFlowmq(async (b) => {
    await createStream(b, o.topic, o.partitions);
    await before?.(b);
    const r = await kafkaProduceThroughput(b.kafkaPort, o);
    await after?.(b);
    return r;
  }, args);
}

/** What the broker says of its storage backends (GET /api/v1/broker, key storage): pools, requests, cache. */
async function storageFigures(b: Broker): Promise<Record<string, unknown> | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${b.httpPort}/api/v1/broker`);
    return ((await res.json()) as { storage?: Record<string, unknown> }).storage ?? null;
  } catch {
    return null;
  }
}

// ------------------------------------------------------------------ storage scenarios: embedded vs shared

interface StorageConfig {
  id: 'embedded' | 'shared' | 'sharded' | 'diskless';
  label: string;
  /** Options of a broker with a fresh store of this kind. */
  args(): Promise<string[]>;
  /** Produce-ack p99 target at half of this configuration's own peak (ms). */
  p99TargetMs: number;
}

const STORAGE_CONFIGS: StorageConfig[] = [
  { id: 'embedded', label: 'embedded (SQLite, file WAL, fs objects)', args: async () => [], p99TargetMs: 10 },
  { id: 'shared', label: 'PostgreSQL metastore + WAL, S3 objects (s3rver)', args: sharedStorageArgs, p99TargetMs: 25 },
  // Produce and latency only: the other scenarios measure the object store and the log engine, the same here.
  { id: 'sharded', label: 'the same, WAL sharded over 2 PostgreSQL servers', args: shardedStorageArgs, p99TargetMs: 25 },
  // The window (100 ms) plus 100 ms with s3rver (issue 31).
  { id: 'diskless', label: 'diskless: WAL on S3 objects, indexed in PostgreSQL (--wal object)', args: disklessStorageArgs, p99TargetMs: 200 },
];

/** The configurations beyond embedded and shared whose columns are shown (those selected), in order. */
const EXTRA_CONFIGS = STORAGE_CONFIGS.filter((c) => c.id !== 'embedded' && c.id !== 'shared' && CFG.storageConfigs.includes(c.id)).map((c) => c.id);
const SHOWN_CONFIGS = STORAGE_CONFIGS.filter((c) => c.id === 'embedded' || c.id === 'shared' || EXTRA_CONFIGS.includes(c.id));

/** Cold replay target of the S3 configuration (MB/s). */
const REPLAY_TARGET_MBPS = 100;

const storagePeaks = new Map<StorageConfig['id'], ProduceResult>();

/** Runs `fn` for each storage configuration; a failure of one is reported in its cell, the other still runs. */
async function perConfig<T>(fn: (c: StorageConfig) => Promise<T>, ids?: ReadonlyArray<StorageConfig['id']>): Promise<Map<StorageConfig['id'], Outcome<T>>> {
  const out = new Map<StorageConfig['id'], Outcome<T>>();
  for (const c of STORAGE_CONFIGS) {
    if (!CFG.storageConfigs.includes(c.id) || (ids !== undefined && !ids.includes(c.id))) continue;
    try {
      out.set(c.id, { ok: true, value: await fn(c) });
    } catch (e) {
      console.error(`  ${c.id}: ${errText(e)}`);
      out.set(c.id, { ok: false, error: errText(e) });
    }
  }
  return out;
}

const cell = <T>(o: Outcome<T> | undefined, show: (v: T) => string): string => (!o ? '-' : o.ok ? show(o.value) : `error: ${o.error}`);

/** The broker's per-partition figures of a stream (GET, or POST …/flush to seal everything first). */
async function partitionDetails(b: Broker, stream: string, flush: boolean): Promise<Array<Record<string, number>>> {
  const res = await fetch(`http://127.0.0.1:${b.httpPort}/api/v1/streams/${encodeURIComponent(stream)}${flush ? '/flush' : ''}`, {
    method: flush ? 'POST' : 'GET',
    headers: { 'content-type': 'application/json' },
  });
  if (!res.ok) throw new Error(`${flush ? 'flush' : 'describe'} ${stream}: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { partitionDetails: Array<Record<string, number>> }).partitionDetails;
}

interface ReplayRun {
  producedMb: number;
  produceSeconds: number;
  produceMbPerSec: number;
  flushSeconds: number;
  segments: number;
  restartSeconds: number;
  replay: ReplayResult;
  storage: Record<string, unknown> | null;
}

/**
 * Lays down BENCH_REPLAY_MB of 1 KiB records in small segments, seals all of it into objects (the flush), restarts
 * the broker so that nothing of it is in memory, then reads everything back from offset 0.
 */
async function replayRun(c: StorageConfig): Promise<ReplayRun> {
  const topic = 'bench-replay';
  const P = CFG.kafkaPartitions;
  const batchBytes = CFG.kafkaRecordsPerBatch * CFG.kafkaRecordBytes;
  const batches = Math.max(P, Math.ceil((CFG.replayMb * 1e6) / batchBytes));
  return withFlowmq(
    async (b) => {
      await createStream(b, topic, P);
      const prod = await kafkaProduceBatches(b.kafkaPort, {
        topic,
        partitions: P,
        connections: CFG.kafkaConnections,
        inflight: CFG.kafkaInflight,
        recordsPerBatch: CFG.kafkaRecordsPerBatch,
        recordBytes: CFG.kafkaRecordBytes,
        batches,
      });
      const tf = nowS();
      const sealed = await partitionDetails(b, topic, true);
      const flushSeconds = nowS() - tf;
      const open = sealed.filter((p) => p.flushedOffset !== p.highWatermark || p.tailBytes !== 0);
      if (open.length > 0) throw new Error(`after the flush, partitions ${open.map((p) => p.partition).join(', ')} still have data outside objects`);
      const ends = sealed.map((p) => p.highWatermark);
      const records = ends.reduce((a, e) => a + e, 0);
      if (records !== batches * CFG.kafkaRecordsPerBatch)
        throw new Error(`the stream holds ${records} records, ${batches * CFG.kafkaRecordsPerBatch} were acknowledged`);
      const tr = nowS();
      await b.restart!();
      const restartSeconds = nowS() - tr;
      const after = await partitionDetails(b, topic, false);
      if (after.some((p, i) => p.highWatermark !== ends[i] || p.tailBytes !== 0))
        throw new Error('the restarted broker does not show the sealed stream as it was');
      const replay = await kafkaReplay(b.kafkaPort, { topic, ends, recordBytes: CFG.kafkaRecordBytes, partitionMaxBytes: CFG.replayFetchBytes, timeoutS: 300 });
      if (replay.records !== records) throw new Error(`replay read ${replay.records} records of ${records}`);
      return {
        producedMb: (batches * batchBytes) / 1e6,
        produceSeconds: prod.seconds,
        produceMbPerSec: prod.mbPerSec,
        flushSeconds,
        segments: sealed.reduce((a, p) => a + p.segments, 0),
        restartSeconds,
        replay,
        storage: await storageFigures(b),
      };
    },
    [...(await c.args()), '--segment-bytes', CFG.replaySegment],
  );
}

/** Latency at half of a configuration's peak, producers only, on a fresh broker of that configuration. */
async function latencyRun(c: StorageConfig): Promise<{
  r: LatencyResult;
  bs: { p50: number | null; p99: number | null; count: number };
  peakMbPerSec: number;
  calibrated: boolean;
  storage: Record<string, unknown> | null;
}> {
  // BENCH_STORAGE_LATENCY_MBPS: the same fixed rate for every configuration instead of half of its peak.
  const fixed = process.env.BENCH_STORAGE_LATENCY_MBPS ? num('BENCH_STORAGE_LATENCY_MBPS', 1) : null;
  let p = storagePeaks.get(c.id) ?? (c.id === 'embedded' ? peak : null) ?? null;
  const calibrated = p === null && fixed === null;
  if (p === null && fixed === null) {
    console.log(`  (${c.id}: no produce run selected: measuring peak throughput for 3 s first)`);
    p = await runProduce(3, await c.args());
    storagePeaks.set(c.id, p);
  }
  const peakMbPerSec = p?.mbPerSec ?? NaN;
  const o = {
    topic: 'bench-latency',
    partitions: CFG.kafkaPartitions,
    connections: CFG.kafkaConnections,
    inflight: CFG.kafkaInflight,
    recordBytes: CFG.kafkaRecordBytes,
    bytesPerSec: fixed !== null ? fixed * 1e6 : (peakMbPerSec * 1e6) / 2,
    lingerMs: CFG.kafkaLingerMs,
    warmupS: CFG.kafkaLatencyWarmupS,
    seconds: CFG.seconds,
    consume: false,
  };
  return withFlowmq(
    async (b) => {
      await createStream(b, o.topic, o.partitions);
      const before = await produceHistogram(b.httpPort);
      const r = await kafkaLatency(b.kafkaPort, o);
      const after = await produceHistogram(b.httpPort);
      const bs = { p50: histogramQuantile(0.5, after, before), p99: histogramQuantile(0.99, after, before), count: after.count - before.count };
      return { r, bs, peakMbPerSec, calibrated, storage: await storageFigures(b) };
    },
    await c.args(),
  );
}

// ------------------------------------------------------------------ AMQP scenarios: FlowMQ vs RabbitMQ

const RABBITMQ_BIN = rabbitmqBinDir();
const RABBITMQ_VERSION = RABBITMQ_BIN ? rabbitmqVersion(RABBITMQ_BIN) : null;
const RABBITMQ_MISSING = 'rabbitmq-server not installed (apt-get install rabbitmq-server; BENCH_RABBITMQ_BIN=dir of its rabbitmq-server script)';
let amqpPairIndex = 0;

/** FlowMQ's options for the AMQP scenarios: AMQP on (beside MQTT and Kafka, which startFlowmq waits for). */
const FLOWMQ_AMQP_ARGS = ['--protocols', 'mqtt,kafka,amqp', ...(process.env.BENCH_AMQP_FLOWMQ_ARGS ?? '').split(/\s+/).filter((a) => a !== '')];

/**
 * Runs `fn` once against a fresh FlowMQ and once against a fresh private RabbitMQ node, alternating which goes first;
 * `fn` gets the AMQP port, the broker process's pid (RabbitMQ's Erlang VM) and, for FlowMQ, a reader of its own figures.
 */
async function amqpPair<T>(
  fn: (port: number, pid: number | null, figures: (() => Promise<BrokerFigures | null>) | null) => Promise<T>,
): Promise<{ flowmq: Outcome<T>; rabbitmq: Outcome<T> | null }> {
  const kinds: ('flowmq' | 'rabbitmq')[] = amqpPairIndex++ % 2 === 0 ? ['flowmq', 'rabbitmq'] : ['rabbitmq', 'flowmq'];
  const out: { flowmq?: Outcome<T>; rabbitmq?: Outcome<T> | null } = { rabbitmq: null };
  for (const kind of kinds) {
    if (kind === 'rabbitmq' && !RABBITMQ_BIN) continue;
    let stop: (() => Promise<void>) | null = null;
    try {
      if (kind === 'flowmq') {
        const b = await startFlowmq([...FLOWMQ_AMQP_ARGS, ...(CFG.amqpStorage === 'postgres' ? await sharedStorageArgs() : [])]);
        stop = () => b.stop();
        await waitAmqp(b.amqpPort, 30_000, () => {
          try {
            process.kill(b.pid, 0);
            return true;
          } catch {
            return false;
          }
        });
        out.flowmq = { ok: true, value: await fn(b.amqpPort, b.pid, () => flowmqAmqpFigures(b)) };
      } else {
        const r = await startRabbitmq(RABBITMQ_BIN!);
        stop = () => r.stop();
        out.rabbitmq = { ok: true, value: await fn(r.amqpPort, r.beamPid, null) };
      }
    } catch (e) {
      out[kind] = { ok: false, error: errText(e) };
      console.error(`  ${kind}: ${errText(e)}`);
    } finally {
      await stop?.();
    }
  }
  return { flowmq: out.flowmq!, rabbitmq: out.rabbitmq ?? null };
}

type BrokerFigures = { amqp: Record<string, number> | null; queueStore: Record<string, number> | null; process?: Record<string, number> };

/** FlowMQ's AMQP and queue-store counters (GET /api/v1/broker), to see what a run made the broker do. */
async function flowmqAmqpFigures(b: Broker): Promise<BrokerFigures | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${b.httpPort}/api/v1/broker`);
    const j = (await res.json()) as {
      amqp?: Record<string, number>;
      storage?: { queueStoreFigures?: Record<string, number> };
      process?: Record<string, number>;
    };
    return { amqp: j.amqp ?? null, queueStore: j.storage?.queueStoreFigures ?? null, process: j.process };
  } catch {
    return null;
  }
}

type AmqpRun = AmqpLoadResult & { rssMiB: number | null; broker: BrokerFigures | null };

function amqpOptions(port: number, persistent: boolean): Omit<AmqpLoadOptions, 'brokerPid'> {
  return {
    port,
    queue: persistent ? 'bench-persistent' : 'bench-transient',
    durableQueue: persistent || CFG.amqpTransientQueue === 'durable',
    persistent,
    confirms: persistent,
    window: CFG.amqpWindow,
    publishers: CFG.amqpPublishers,
    consumers: CFG.amqpConsumers,
    prefetch: CFG.amqpPrefetch,
    autoAck: !persistent,
    ahead: CFG.amqpAhead,
    payloadBytes: CFG.amqpPayloadBytes,
    warmupS: CFG.amqpWarmupS,
    seconds: CFG.amqpSeconds,
  };
}

async function amqpRun(port: number, pid: number | null, figures: (() => Promise<BrokerFigures | null>) | null, persistent: boolean): Promise<AmqpRun> {
  const r = await runAmqpLoad({ ...amqpOptions(port, persistent), brokerPid: pid });
  const broker = figures ? await figures() : null;
  let rssMiB: number | null = null;
  try {
    if (pid !== null) rssMiB = rssKiB(pid) / 1024;
  } catch {
    // gone
  }
  return { ...r, rssMiB, broker };
}

function amqpNotes(r: AmqpRun): string {
  const notes: string[] = [];
  if (r.backlogAtEnd > CFG.amqpAhead / 2 || (CFG.amqpAhead === 0 && r.backlogAtEnd > 1000)) notes.push(`backlog ${fmt(r.backlogAtEnd)} at the end`);
  if (r.heldByAhead >= 0.05) notes.push(`publishers held back ${fmt(100 * r.heldByAhead, 0)}% of the time`);
  if (r.undelivered > 0) notes.push(`${fmt(r.undelivered)} published, never delivered`);
  if (r.undelivered < 0) notes.push(`${fmt(-r.undelivered)} more deliveries than publishes`);
  if (r.redelivered > 0) notes.push(`${fmt(r.redelivered)} redelivered`);
  if (r.errors.length > 0) notes.push(`errors: ${r.errors.slice(0, 2).join('; ')}`);
  const qs = r.broker?.queueStore;
  if (qs && qs.commits > 0) notes.push(`queue store: ${fmt(qs.commits)} commits, ${fmt(qs.calls / qs.commits, 1)} calls each`);
  if (r.cpu.broker !== null) notes.push(`CPU: broker ${fmt(100 * r.cpu.broker, 0)}%, generator ${fmt(100 * r.cpu.generator, 0)}%`);
  return notes.length ? ` (${notes.join(', ')})` : '';
}

const persistentCell = (r: AmqpRun) =>
  `${fmt(r.publishPerSec)} confirmed/s, ${fmt(r.consumePerSec)} acked deliveries/s; confirm p50 / p99 ${fmt(r.confirm!.p50, 1)} / ${fmt(r.confirm!.p99, 1)} ms; publish → delivery p50 / p99 ${fmt(r.endToEnd.p50, 1)} / ${fmt(r.endToEnd.p99, 1)} ms${amqpNotes(r)}`;
const transientCell = (r: AmqpRun) =>
  `${fmt(r.publishPerSec)} published/s, ${fmt(r.consumePerSec)} deliveries/s; publish → delivery p50 / p99 ${fmt(r.endToEnd.p50, 1)} / ${fmt(r.endToEnd.p99, 1)} ms${amqpNotes(r)}`;

/** Throughput of a run: the slower of its two sides (publishes and deliveries, each per second of the window). */
const amqpRate = (r: AmqpRun) => Math.min(r.publishPerSec, r.consumePerSec);

function amqpScenario(persistent: boolean): Scenario {
  const name = persistent ? 'amqp-persistent' : 'amqp-transient';
  const shape = `${fmt(CFG.amqpPayloadBytes)}-byte messages, ${CFG.amqpPublishers} publisher(s) → ${persistent ? 'a durable' : `a ${CFG.amqpTransientQueue === 'durable' ? 'durable' : 'non-durable'}`} queue → ${CFG.amqpConsumers} consumer(s), publishers ≤ ${CFG.amqpAhead ? fmt(CFG.amqpAhead) : '∞'} messages ahead`;
  const title = persistent
    ? `persistent (delivery mode 2), publisher confirms with ≤ ${CFG.amqpWindow} unconfirmed, manual acks with prefetch ${CFG.amqpPrefetch}: ${shape} (target ≥ 1.5× RabbitMQ at a lower confirm p99)`
    : `transient (delivery mode 1), no confirms, no-ack consumers: ${shape}`;
  return {
    name,
    group: 'amqp',
    title,
    run: async () => {
      const r = await amqpPair((port, pid, figures) => amqpRun(port, pid, figures, persistent));
      const f = r.flowmq;
      const m = r.rabbitmq;
      const show = persistent ? persistentCell : transientCell;
      let verdict = '-';
      if (f.ok && m?.ok) {
        const x = amqpRate(f.value) / amqpRate(m.value);
        verdict = `${ratio(f.value.publishPerSec, m.value.publishPerSec)} published, ${ratio(f.value.consumePerSec, m.value.consumePerSec)} delivered`;
        if (persistent) {
          const fp99 = f.value.confirm!.p99;
          const mp99 = m.value.confirm!.p99;
          const met = x >= 1.5 && fp99 < mp99 && f.value.errors.length === 0;
          verdict += `; confirm p99 ${fmt(fp99, 1)} vs ${fmt(mp99, 1)} ms; ≥ 1.5× at a lower p99: ${met ? 'met' : 'not met'}`;
        }
      } else if (persistent) verdict = '≥ 1.5× at a lower p99: not measured';
      rows.push({
        group: 'amqp',
        scenario: name,
        title,
        flowmq: f.ok ? show(f.value) : `error: ${f.error}`,
        peer: !m ? RABBITMQ_MISSING : m.ok ? show(m.value) : `error: ${m.error}`,
        ratio: verdict,
        data: { options: { ...amqpOptions(0, persistent), port: undefined }, flowmqArgs: FLOWMQ_AMQP_ARGS, flowmq: f, rabbitmq: m },
      });
    },
  };
}

const fairnessOptions = (port: number): AmqpFairnessOptions => ({
  port,
  payloadBytes: CFG.amqpPayloadBytes,
  window: CFG.amqpFairWindow,
  aloneS: CFG.amqpFairAloneS,
  warmupS: CFG.amqpWarmupS,
  floodS: CFG.amqpSeconds,
  floodPersistent: CFG.amqpFloodMode !== 'transient',
});

const fairnessCell = (r: AmqpFairnessResult) =>
  `confirm p50 / p99 alone ${fmt(r.alone.p50, 1)} / ${fmt(r.alone.p99, 1)} ms (${fmt(r.alonePerSec)} confirmed/s); while another connection floods ${fmt(r.floodPerSec)} publishes/s: ${fmt(r.flooded.p50, 1)} / ${fmt(r.flooded.p99, 1)} ms (${fmt(r.floodedPerSec)} confirmed/s)${r.errors.length ? ` (errors: ${r.errors.slice(0, 2).join('; ')})` : ''}`;

/**
 * Issue 24: one publisher without confirms flooding a durable queue must not starve another client's confirms (the
 * queue store is shared fairly, per-connection credit as RabbitMQ's credit_flow).
 */
function amqpFairnessScenario(): Scenario {
  const title = `fairness${CFG.amqpStorage === 'postgres' ? ' (FlowMQ on PostgreSQL + S3)' : ''}: a client's publisher confirms (≤ ${CFG.amqpFairWindow} unconfirmed, ${fmt(CFG.amqpPayloadBytes)}-byte persistent messages, durable queue) alone, then while another connection floods another durable queue with ${CFG.amqpFloodMode === 'transient' ? 'transient' : 'persistent'} messages without confirms`;
  return {
    name: 'amqp-fairness',
    group: 'amqp',
    title,
    run: async () => {
      const r = await amqpPair((port) => runAmqpFairness(fairnessOptions(port)));
      const f = r.flowmq;
      const m = r.rabbitmq;
      let verdict = '-';
      if (f.ok && m?.ok) {
        verdict = `with the flooder, confirm p50 ${ratio(f.value.flooded.p50, m.value.flooded.p50)}, p99 ${ratio(f.value.flooded.p99, m.value.flooded.p99)} RabbitMQ's (alone: p50 ${ratio(f.value.alone.p50, m.value.alone.p50)}, p99 ${ratio(f.value.alone.p99, m.value.alone.p99)}); flood ${ratio(f.value.floodPerSec, m.value.floodPerSec)}`;
      }
      rows.push({
        group: 'amqp',
        scenario: 'amqp-fairness',
        title,
        flowmq: f.ok ? fairnessCell(f.value) : `error: ${f.error}`,
        peer: !m ? RABBITMQ_MISSING : m.ok ? fairnessCell(m.value) : `error: ${m.error}`,
        ratio: verdict,
        data: { options: { ...fairnessOptions(0), port: undefined }, flowmqArgs: FLOWMQ_AMQP_ARGS, storage: CFG.amqpStorage, flowmq: f, rabbitmq: m },
      });
    },
  };
}

// ------------------------------------------------------------------ NATS scenarios: FlowMQ vs nats-server

const NATS_SERVER = natsServerBinary();
const NATS_SERVER_VERSION = NATS_SERVER ? natsServerVersion(NATS_SERVER) : null;
const NATS_SERVER_MISSING = 'nats-server not installed (apt-get install nats-server; BENCH_NATS_SERVER=path of another binary)';
const FLOWMQ_NO_NATS = 'FlowMQ has no NATS listener yet';
let natsPairIndex = 0;
/** Set once a FlowMQ start has shown that this build has no NATS listener: the other scenarios do not try again. */
let flowmqNatsMissing: string | null = null;

/** FlowMQ's options for the NATS scenarios: NATS beside MQTT and Kafka (which startFlowmq waits for), no AMQP. */
const flowmqNatsArgs = (port: number) => [
  '--protocols',
  'mqtt,kafka,nats',
  '--nats-port',
  String(port),
  ...(process.env.BENCH_NATS_FLOWMQ_ARGS ?? '').split(/\s+/).filter((a) => a !== ''),
];

/** FlowMQ's NATS counters (GET /api/v1/broker), to see what a run made the broker do (slow consumers, drops). */
async function flowmqNatsFigures(b: Broker): Promise<Record<string, unknown> | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${b.httpPort}/api/v1/broker`);
    const j = (await res.json()) as { nats?: Record<string, unknown> };
    return j.nats ?? null;
  } catch {
    return null;
  }
}

type NatsRun<T> = T & { rssMiB: number | null; broker: Record<string, unknown> | null };

/**
 * Runs `fn` once against a fresh FlowMQ and once against a fresh private nats-server, alternating which goes first;
 * `fn` gets the NATS port and the broker's pid. A FlowMQ build without a NATS listener (`--protocols` refuses
 * `nats`, or the port never serves INFO) is reported as such, and nats-server is still measured.
 */
async function natsPair<T extends object>(
  fn: (port: number, pid: number) => Promise<T>,
): Promise<{ flowmq: Outcome<NatsRun<T>>; natsServer: Outcome<NatsRun<T>> | null }> {
  const kinds: ('flowmq' | 'nats-server')[] = natsPairIndex++ % 2 === 0 ? ['flowmq', 'nats-server'] : ['nats-server', 'flowmq'];
  const out: { flowmq?: Outcome<NatsRun<T>>; natsServer?: Outcome<NatsRun<T>> | null } = { natsServer: null };
  const rss = (pid: number) => {
    try {
      return rssKiB(pid) / 1024;
    } catch {
      return null;
    }
  };
  for (const kind of kinds) {
    if (kind === 'nats-server' && !NATS_SERVER) continue;
    if (kind === 'flowmq' && flowmqNatsMissing !== null) {
      out.flowmq = { ok: false, error: flowmqNatsMissing };
      continue;
    }
    let stop: (() => Promise<void>) | null = null;
    try {
      if (kind === 'flowmq') {
        let port = await freePort();
        let b: Broker;
        try {
          // startFlowmq retries its own ports on EADDRINUSE; the NATS port is ours to pick again.
          for (let attempt = 1; ; attempt++) {
            try {
              b = await startFlowmq(flowmqNatsArgs(port));
              break;
            } catch (e) {
              if (attempt >= 3 || !/EADDRINUSE/.test(e instanceof Error ? e.message : String(e))) throw e;
              port = await freePort();
            }
          }
          stop = () => b.stop();
          await waitNatsInfo(port, 30_000, () => {
            try {
              process.kill(b.pid, 0);
              return true;
            } catch {
              return false;
            }
          });
        } catch (e) {
          // This build refuses `nats` in --protocols (or has no such option), or nothing answers on its NATS port.
          const text = e instanceof Error ? e.message : String(e);
          if (/nats/i.test(text) && /not implemented|unknown|invalid/i.test(text)) {
            const line = text.split('\n').find((l) => /nats/i.test(l) && /not implemented|unknown|invalid/i.test(l)) ?? text.split('\n')[0];
            flowmqNatsMissing = `${FLOWMQ_NO_NATS} (${line
              .replace(/^flowmq: /, '')
              .replace(/ \(got .*\)$/, '')
              .trim()})`;
          } else if (/NATS INFO/.test(text)) flowmqNatsMissing = `${FLOWMQ_NO_NATS} (${errText(e)})`;
          else throw e;
          throw new Error(flowmqNatsMissing);
        }
        const value = await fn(port, b.pid);
        out.flowmq = { ok: true, value: { ...value, rssMiB: rss(b.pid), broker: await flowmqNatsFigures(b) } };
      } else {
        const n = await startNatsServer(NATS_SERVER!);
        stop = () => n.stop();
        const value = await fn(n.port, n.pid);
        out.natsServer = { ok: true, value: { ...value, rssMiB: rss(n.pid), broker: null } };
      }
    } catch (e) {
      out[kind === 'flowmq' ? 'flowmq' : 'natsServer'] = { ok: false, error: errText(e) };
      console.error(`  ${kind}: ${errText(e)}`);
    } finally {
      await stop?.();
    }
  }
  return { flowmq: out.flowmq!, natsServer: out.natsServer ?? null };
}

/**
 * CPU over the measured phase, and the broker's rate per CPU-second it used: on a machine shared with other work a
 * broker gets what the scheduler gives it (nats-server's many threads get more of a loaded machine than FlowMQ's one
 * event loop), and this says how much each broker did with what it had.
 */
const cpuNote = (cpu: CpuUse, rate: number) =>
  `CPU: broker ${cpu.broker === null ? '?' : `${fmt(100 * cpu.broker, 0)}% (${fmt(rate / cpu.broker)} per CPU-second)`}${cpu.brokerWaiting !== null && cpu.brokerWaiting >= 0.05 ? `, broker waiting for a CPU ${fmt(100 * cpu.brokerWaiting, 0)}%` : ''}, generator ${fmt(100 * cpu.generator, 0)}%`;

/** What FlowMQ's own NATS counters say went wrong in a run (slow consumers closed, failed writes), if anything. */
function brokerNotes(b: Record<string, unknown> | null): string[] {
  const n = (k: string) => (b && typeof b[k] === 'number' ? (b[k] as number) : 0);
  const out: string[] = [];
  if (n('slowConsumers') > 0) out.push(`broker closed ${n('slowConsumers')} slow consumer(s)`);
  if (n('writeFailures') > 0) out.push(`${n('writeFailures')} failed writes`);
  return out;
}

function pubSubCell(r: NatsRun<NatsPubSubResult>): string {
  const notes: string[] = brokerNotes(r.broker);
  if (r.lost > 0) notes.push(`${fmt(r.lost)} of ${fmt(r.expected)} deliveries lost`);
  if (r.perSubscriberMin !== r.perSubscriberMax) notes.push(`per member ${fmt(r.perSubscriberMin)}–${fmt(r.perSubscriberMax)}`);
  if (r.heldByAhead >= 0.05) notes.push(`publisher held back ${fmt(100 * r.heldByAhead, 0)}% of the time`);
  if (r.errors.length > 0) notes.push(`errors: ${r.errors.slice(0, 2).join('; ')}`);
  notes.push(cpuNote(r.cpu, r.deliveriesPerSec));
  return `${fmt(r.deliveriesPerSec)} deliveries/s (${fmt(r.payloadMBPerSec, 1)} MB/s of payload; ${notes.join(', ')})`;
}

function requestCell(r: NatsRun<NatsRequestResult>): string {
  const notes: string[] = brokerNotes(r.broker);
  if (r.unanswered > 0) notes.push(`${fmt(r.unanswered)} unanswered`);
  if (r.errors.length > 0) notes.push(`errors: ${r.errors.slice(0, 2).join('; ')}`);
  notes.push(cpuNote(r.cpu, r.roundTripsPerSec));
  return `${fmt(r.roundTripsPerSec)} round trips/s; p50 / p99 ${fmt(r.rtt.p50, 3)} / ${fmt(r.rtt.p99, 3)} ms (${notes.join(', ')})`;
}

/** The issue's targets against nats-server: ≥ 0.5× at 1 KiB, ≥ 0.25× at 16 bytes (larger payloads: the 1 KiB one). */
const natsTarget = (payloadBytes: number) => (payloadBytes >= 1024 ? 0.5 : 0.25);

function natsVerdict<T extends object>(
  r: { flowmq: Outcome<T>; natsServer: Outcome<T> | null },
  rate: (v: T) => number,
  payloadBytes: number,
  ok: (v: T) => boolean,
): string {
  const target = natsTarget(payloadBytes);
  const f = r.flowmq;
  const n = r.natsServer;
  if (!f.ok || !n?.ok) return `≥ ${target}×: not measured`;
  const x = rate(f.value) / rate(n.value);
  return `${ratio(rate(f.value), rate(n.value))}; ≥ ${target}×: ${x >= target && ok(f.value) ? 'met' : 'not met'}`;
}

function natsPubSubScenario(name: string, payloadBytes: number, subscribers: number, queueGroup: boolean): Scenario {
  const shape = queueGroup
    ? `1 publisher → a queue group of ${subscribers}`
    : subscribers === 1
      ? '1 publisher → 1 subscriber'
      : `fan-out, 1 publisher → ${subscribers} subscribers`;
  const title = `${fmt(payloadBytes)}-byte messages, ${shape} (deliveries/s)`;
  return {
    name,
    group: 'nats',
    title,
    run: async () => {
      const opts = { payloadBytes, subscribers, queueGroup, aheadBytes: CFG.natsAheadBytes, warmupS: CFG.natsWarmupS, seconds: CFG.natsSeconds };
      const r = await natsPair((port, pid) => runNatsPubSub({ ...opts, port, brokerPid: pid }));
      const f = r.flowmq;
      const n = r.natsServer;
      rows.push({
        group: 'nats',
        scenario: name,
        title,
        flowmq: f.ok ? pubSubCell(f.value) : `error: ${f.error}`,
        peer: !n ? NATS_SERVER_MISSING : n.ok ? pubSubCell(n.value) : `error: ${n.error}`,
        ratio: natsVerdict(
          r,
          (v) => v.deliveriesPerSec,
          payloadBytes,
          (v) => v.lost === 0 && v.errors.length === 0,
        ),
        data: { options: opts, flowmqArgs: flowmqNatsArgs(0), flowmq: f, natsServer: n },
      });
    },
  };
}

function natsRequestScenario(name: string, inflight: number): Scenario {
  const payloadBytes = CFG.natsRequestPayloadBytes;
  const title = `request/reply, ${fmt(payloadBytes)}-byte requests and replies, ${inflight === 1 ? 'one request at a time' : `${inflight} requests in flight`} (round trips/s, round-trip p50 / p99)`;
  return {
    name,
    group: 'nats',
    title,
    run: async () => {
      const opts = { payloadBytes, inflight, warmupS: CFG.natsWarmupS, seconds: CFG.natsSeconds };
      const r = await natsPair((port, pid) => runNatsRequest({ ...opts, port, brokerPid: pid }));
      const f = r.flowmq;
      const n = r.natsServer;
      let verdict = natsVerdict(
        r,
        (v) => v.roundTripsPerSec,
        payloadBytes,
        (v) => v.unanswered === 0 && v.errors.length === 0,
      );
      if (f.ok && n?.ok) verdict += `; p99 ${fmt(f.value.rtt.p99, 3)} vs ${fmt(n.value.rtt.p99, 3)} ms`;
      rows.push({
        group: 'nats',
        scenario: name,
        title,
        flowmq: f.ok ? requestCell(f.value) : `error: ${f.error}`,
        peer: !n ? NATS_SERVER_MISSING : n.ok ? requestCell(n.value) : `error: ${n.error}`,
        ratio: verdict,
        data: { options: opts, flowmqArgs: flowmqNatsArgs(0), flowmq: f, natsServer: n },
      });
    },
  };
}

// ------------------------------------------------------------------ registry

interface Scenario {
  name: string;
  group: Group;
  title: string;
  run: () => Promise<void>;
}

const scenarios: Scenario[] = [
  mqttScenario('mqtt-qos0', 'QoS 0, 1 publisher → 1 subscriber (deliveries/s)', {
    publishers: 1,
    pubQos: 0,
    subscribers: 1,
    subQos: 0,
    shared: false,
    ahead: perSubscriber(1),
  }),
  mqttScenario('mqtt-qos1', 'QoS 1, 1 publisher → 1 subscriber (deliveries/s)', {
    publishers: 1,
    pubQos: 1,
    subscribers: 1,
    subQos: 1,
    shared: false,
    ahead: perSubscriber(1),
  }),
  mqttScenario('mqtt-fanin-qos0', `QoS 0 fan-in, ${CFG.faninPublishers} publishers → 1 subscriber (deliveries/s)`, {
    publishers: CFG.faninPublishers,
    pubQos: 0,
    subscribers: 1,
    subQos: 0,
    shared: false,
    ahead: perSubscriber(CFG.faninPublishers),
  }),
  mqttScenario('mqtt-fanin-qos1', `QoS 1 fan-in, ${CFG.faninPublishers} publishers → 1 subscriber (deliveries/s)`, {
    publishers: CFG.faninPublishers,
    pubQos: 1,
    subscribers: 1,
    subQos: 1,
    shared: false,
    ahead: perSubscriber(CFG.faninPublishers),
  }),
  mqttScenario('mqtt-fanout', `QoS 0 fan-out, 1 publisher → ${CFG.fanoutSubscribers} subscribers (deliveries/s)`, {
    publishers: 1,
    pubQos: 0,
    subscribers: CFG.fanoutSubscribers,
    subQos: 0,
    shared: false,
    ahead: CFG.fanoutAhead,
  }),
  mqttScenario('mqtt-shared', `QoS 1 shared subscription, 1 publisher → $share group of ${CFG.sharedMembers} (deliveries/s)`, {
    publishers: 1,
    pubQos: 1,
    subscribers: CFG.sharedMembers,
    subQos: 1,
    shared: true,
    ahead: CFG.ahead,
  }),
  {
    name: 'mqtt-flood-memory',
    group: 'mqtt',
    title: floodTitle('MQTT'),
    run: async () => {
      const o = floodOptions();
      const r = await pair((b) => runFloods('mqtt', floodTarget(b, 'mqtt'), o));
      const f = r.flowmq;
      const m = r.mosquitto;
      rows.push({
        group: 'mqtt',
        scenario: 'mqtt-flood-memory',
        title: floodTitle('MQTT'),
        flowmq: f.ok ? `${floodCell(f.value)}; ${heapCell(f.value)}` : `error: ${f.error}`,
        peer: !m ? 'mosquitto not installed' : m.ok ? floodCell(m.value) : `error: ${m.error}`,
        ratio: f.ok && m?.ok ? `held after: ${fmt(heldMiB(f.value), 0)} vs ${fmt(heldMiB(m.value), 0)} MiB` : '-',
        data: { options: o, flowmq: f, mosquitto: m },
      });
    },
  },
  {
    name: 'kafka-produce',
    group: 'kafka',
    title: 'produce throughput, 1 KiB records, acks=all (MB/s, % of fsync disk bandwidth)',
    run: async () => {
      const d = await measureDisk();
      const o = produceOptions(CFG.seconds);
      const title = `produce: 1 KiB records, ~1 MB batch per partition request, acks=all, ${o.partitions} partitions, ${o.connections} connections × ${o.inflight} in flight (MB/s; target ≥ 50% of disk)`;
      try {
        peak = await runProduce(CFG.seconds);
        rows.push({
          group: 'kafka',
          scenario: 'kafka-produce',
          title,
          flowmq: `${fmt(peak.mbPerSec, 1)} MB/s (${fmt(peak.recordsPerSec)} records/s${peak.errors ? `, ${peak.errors} errors` : ''})`,
          peer: `disk ${fmt(d.mbPerSec, 1)} MB/s`,
          ratio: `${fmt((100 * peak.mbPerSec) / d.mbPerSec, 0)}% of disk (≥ 50%: ${peak.mbPerSec >= d.mbPerSec / 2 ? 'met' : 'not met'})`,
          data: { options: o, flowmq: peak, disk: d },
        });
      } catch (e) {
        rows.push({
          group: 'kafka',
          scenario: 'kafka-produce',
          title,
          flowmq: `error: ${errText(e)}`,
          peer: '-',
          ratio: '-',
          data: { options: o, error: errText(e) },
        });
      }
    },
  },
  {
    name: 'kafka-latency',
    group: 'kafka',
    title: 'produce-ack and end-to-end latency at half of peak throughput',
    run: async () => {
      await measureDisk();
      let calibrated = false;
      try {
        if (!peak) {
          console.log('  (no produce run selected: measuring peak throughput for 3 s first)');
          peak = await runProduce(3);
          calibrated = true;
        }
        const bytesPerSec = process.env.BENCH_KAFKA_LATENCY_MBPS ? num('BENCH_KAFKA_LATENCY_MBPS', 1) * 1e6 : (peak.mbPerSec * 1e6) / 2;
        const o = {
          topic: 'bench-latency',
          partitions: CFG.kafkaPartitions,
          connections: CFG.kafkaConnections,
          inflight: CFG.kafkaInflight,
          recordBytes: CFG.kafkaRecordBytes,
          bytesPerSec,
          lingerMs: CFG.kafkaLingerMs,
          warmupS: CFG.kafkaLatencyWarmupS,
          seconds: CFG.seconds,
        };
        // Two runs at the same rate, each on a fresh broker: producers alone (as in the peak run, against which the
        // target is set), then with a consumer reading everything (the end-to-end latency; on a two-core machine the
        // consumer's share of the CPU shows in the producers' latency too).
        const measure = async (consume: boolean) => {
          let brokerSide: { p50: number | null; p99: number | null; count: number } | null = null;
          const res: LatencyResult = await withFlowmq(async (b) => {
            await createStream(b, o.topic, o.partitions);
            const before = await produceHistogram(b.httpPort);
            const r = await kafkaLatency(b.kafkaPort, { ...o, consume });
            const after = await produceHistogram(b.httpPort);
            brokerSide = { p50: histogramQuantile(0.5, after, before), p99: histogramQuantile(0.99, after, before), count: after.count - before.count };
            return r;
          });
          return { r: res, bs: brokerSide as { p50: number | null; p99: number | null; count: number } | null };
        };
        const alone = await measure(false);
        const withConsumer = await measure(true);
        const rate = process.env.BENCH_KAFKA_LATENCY_MBPS ? 'set by BENCH_KAFKA_LATENCY_MBPS' : 'half of peak';
        const ackFigures = ({ r, bs }: { r: LatencyResult; bs: { p50: number | null; p99: number | null } | null }) => {
          const queued =
            r.queuedBatches > 0
              ? ` (${fmt((100 * r.queuedBatches) / Math.max(1, r.produceAck.count), 0)}% waited for an in-flight slot; from write: ${fmt(r.produceAckFromWrite.p50, 1)} / ${fmt(r.produceAckFromWrite.p99, 1)} ms)`
              : '';
          const broker =
            bs && bs.p50 !== null && bs.p99 !== null
              ? `; broker-side (request decoded → durable response, incl. warm-up): ≤ ${fmt(bs.p50, 1)} / ≤ ${fmt(bs.p99, 1)} ms`
              : '';
          return `${fmt(r.produceAck.p50, 1)} / ${fmt(r.produceAck.p99, 1)} ms${queued}${broker}`;
        };
        const at = (r: LatencyResult) =>
          `at ${fmt(r.targetMbPerSec, 1)} MB/s (${rate}; ${fmt(r.achievedMbPerSec, 1)} acked), ~${fmt(r.recordsPerBatch)}-record batches every ${o.lingerMs} ms per partition, ≤ ${o.inflight} in flight per connection, after ${fmt(r.warmupS, 1)} s of warm-up`;
        rows.push({
          group: 'kafka',
          scenario: 'kafka-latency',
          title: `produce → ack latency p50 / p99, producers only, ${at(alone.r)} (target p99 < 10 ms)`,
          flowmq: ackFigures(alone),
          peer: '-',
          ratio: alone.r.produceAck.p99 < 10 ? 'p99 < 10 ms: met' : 'p99 < 10 ms: not met',
          data: { options: o, peakFromCalibration: calibrated, flowmq: alone.r, brokerSide: alone.bs },
        });
        const wc = withConsumer.r;
        const lost = wc.consumed !== wc.produced ? ` (consumed ${fmt(wc.consumed)} of ${fmt(wc.produced)} records)` : '';
        rows.push({
          group: 'kafka',
          scenario: 'kafka-latency',
          title: `the same with a consumer reading everything (Fetch v4 long poll, max wait 500 ms, min bytes 1; its own thread): produce → ack p50 / p99, ${at(wc)}`,
          flowmq: ackFigures(withConsumer),
          peer: '-',
          ratio: wc.produceAck.p99 < 10 ? 'p99 < 10 ms' : 'p99 ≥ 10 ms',
          data: { options: { ...o, consume: true }, flowmq: wc, brokerSide: withConsumer.bs },
        });
        rows.push({
          group: 'kafka',
          scenario: 'kafka-latency',
          title: 'end-to-end produce → fetch latency p50 / p99, same run',
          flowmq: `${fmt(wc.endToEnd.p50, 1)} / ${fmt(wc.endToEnd.p99, 1)} ms${lost}`,
          peer: '-',
          ratio: '-',
          data: { see: 'previous row' },
        });
      } catch (e) {
        rows.push({
          group: 'kafka',
          scenario: 'kafka-latency',
          title: 'latency at half of peak',
          flowmq: `error: ${errText(e)}`,
          peer: '-',
          ratio: '-',
          data: { error: errText(e) },
        });
      }
    },
  },
  {
    name: 'kafka-auth-flood',
    group: 'kafka',
    title: 'authenticated acks=all produce latency during a wrong-password flood',
    run: async () => {
      // One broker with a users file; a SASL PLAIN producer sends one 100-byte record at a time at a modest fixed rate,
      // first alone, then while a wrong-password Kafka SASL PLAIN flood runs (from one address, then spread over 100
      // loopback addresses so that the per-address slowdown alone cannot absorb it and the verifier's bounded queue
      // does the work). Issue 12 saw p50 11.5 s here before password checks left libuv's thread pool.
      const dir = tempDir('flowmq-bench-users-');
      const usersFile = join(dir, 'users.yaml');
      writeFileSync(usersFile, '- username: producer\n  password: right-password\n- username: victim\n  password: unguessable\n');
      const rate = CFG.authProduceRate;
      const count = Math.max(10, Math.round(rate * CFG.seconds));
      const title = (what: string) => `kafka-auth-flood: SASL PLAIN producer, acks=all, ${rate} produces/s one at a time, produce → ack p50 / p99, ${what}`;
      try {
        await withFlowmq(
          async (b) => {
            await createStream(b, 'bench-auth', 1, { username: 'producer', password: 'right-password' });
            const producer = await SaslProducer.open(b.kafkaPort, 'producer', 'right-password');
            try {
              await producer.run('bench-auth', rate, Math.max(5, Math.round(rate * CFG.warmupS)));
              const alone = await producer.run('bench-auth', rate, count);
              rows.push({
                group: 'kafka',
                scenario: 'kafka-auth-flood',
                title: title('no flood'),
                flowmq: `${fmt(alone.ack.p50, 2)} / ${fmt(alone.ack.p99, 2)} ms`,
                peer: '-',
                ratio: '-',
                data: { rate, alone },
              });
              for (const spread of [1, 100]) {
                const localAddresses = Array.from({ length: spread }, (_, i) => `127.0.${1 + Math.floor(i / 250)}.${1 + (i % 250)}`);
                const flood = new AuthFlood({
                  port: b.kafkaPort,
                  protocol: 'kafka',
                  sockets: CFG.authFloodSockets,
                  localAddresses,
                  username: 'victim',
                  password: 'wrong',
                  ratePerSec: CFG.authFloodRate,
                });
                flood.start();
                const t0 = nowS();
                let during;
                try {
                  await sleep(1000); // the flood under way first
                  during = await producer.run('bench-auth', rate, count);
                } finally {
                  await flood.stop();
                }
                const secs = nowS() - t0;
                const f = flood.stats;
                const floodText = `${CFG.authFloodSockets} sockets from ${spread} address${spread > 1 ? 'es' : ''}, ${fmt(f.sent / secs)} attempts/s (${fmt(f.refused)} checked and refused, ${fmt(f.closed + f.busy)} answered busy)`;
                const p99 = during.ack.p99;
                rows.push({
                  group: 'kafka',
                  scenario: 'kafka-auth-flood',
                  title: title(`during a wrong-password SASL PLAIN flood: ${floodText} (target p99 < 50 ms)`),
                  flowmq: `${fmt(during.ack.p50, 2)} / ${fmt(p99, 2)} ms${during.errors ? ` (${during.errors} errors)` : ''}`,
                  peer: '-',
                  ratio: p99 < 50 ? 'p99 < 50 ms: met' : 'p99 < 50 ms: not met',
                  data: { rate, spread, flood: { ...f, seconds: secs, sockets: CFG.authFloodSockets, ratePerSec: CFG.authFloodRate }, during },
                });
              }
            } finally {
              producer.close();
            }
          },
          ['--users-file', usersFile],
        );
      } catch (e) {
        rows.push({
          group: 'kafka',
          scenario: 'kafka-auth-flood',
          title: title('(failed)'),
          flowmq: `error: ${errText(e)}`,
          peer: '-',
          ratio: '-',
          data: { error: errText(e) },
        });
      } finally {
        removeDir(dir);
      }
    },
  },
  {
    name: 'kafka-flood-memory',
    group: 'kafka',
    title: floodTitle('Kafka'),
    run: async () => {
      const o = floodOptions();
      try {
        const r = await withFlowmq((b) => runFloods('kafka', floodTarget(b, 'kafka'), o));
        rows.push({
          group: 'kafka',
          scenario: 'kafka-flood-memory',
          title: floodTitle('Kafka'),
          flowmq: `${floodCell(r)}; ${heapCell(r)}`,
          peer: '-',
          ratio: '-',
          data: { options: o, flowmq: r },
        });
      } catch (e) {
        rows.push({
          group: 'kafka',
          scenario: 'kafka-flood-memory',
          title: floodTitle('Kafka'),
          flowmq: `error: ${errText(e)}`,
          peer: '-',
          ratio: '-',
          data: { options: o, error: errText(e) },
        });
      }
    },
  },
  {
    name: 'storage-produce',
    group: 'storage',
    title: 'sustained produce, embedded vs PostgreSQL + S3',
    run: async () => {
      const o = produceOptions(CFG.seconds);
      const title = `sustained produce: 1 KiB records, ~1 MB batch per partition request, acks=all, ${o.partitions} partitions, ${o.connections} connections × ${o.inflight} in flight, after ${o.warmupS} s of warm-up (MB/s)`;
      const r = await perConfig(async (c) => {
        let storage: Record<string, unknown> | null = null;
        const args = await c.args();
        // PostgreSQL's CPU while the producers run (warm-up included: the broker's start, its schema and the topic's
        // creation are not), per MB produced (the warm-up at about the measured rate): the cost of a megabyte on the
        // database server, its background work (checkpoints, autovacuum) included; what it uses idle is measured for
        // 2 s before and shown beside (subtracting it is noise-bound: 10 ms ticks, bursts of background work).
        const pgIdle = c.id === 'embedded' ? 0 : await postgresIdleMsPerSec();
        let cpu0 = 0;
        let pgCpuMs = 0;
        const res = await runProduce(
          CFG.seconds,
          args,
          async (b) => {
            if (c.id !== 'embedded') pgCpuMs = (await postgresCpuMs()) - cpu0;
            storage = await storageFigures(b);
          },
          async () => {
            if (c.id === 'embedded') return;
            cpu0 = await postgresCpuMs();
          },
        );
        const pgCpuMsPerMb = c.id === 'embedded' ? null : pgCpuMs / (res.mbPerSec * (CFG.seconds + o.warmupS));
        storagePeaks.set(c.id, res);
        if (c.id === 'embedded') peak ??= res;
        return { ...res, storage, pgCpuMsPerMb, pgIdle };
      });
      const show = (v: ProduceResult & { pgCpuMsPerMb: number | null; pgIdle: number }) =>
        `${fmt(v.mbPerSec, 1)} MB/s (${fmt(v.recordsPerSec)} records/s; ack p50 / p99 ${fmt(v.ack.p50, 1)} / ${fmt(v.ack.p99, 1)} ms${v.errors ? `; ${v.errors} errors` : ''}${v.pgCpuMsPerMb !== null ? `; PostgreSQL ${fmt(v.pgCpuMsPerMb, 2)} ms CPU per MB, ${fmt(v.pgIdle, 1)} ms/s idle` : ''})`;
      const e = r.get('embedded');
      const s = r.get('shared');
      const sh = r.get('sharded');
      const dl = r.get('diskless');
      const ratios = [
        ...(e?.ok && s?.ok ? [`PostgreSQL + S3 at ${fmt((100 * s.value.mbPerSec) / e.value.mbPerSec, 0)}% of embedded`] : []),
        ...(s?.ok && sh?.ok ? [`sharded WAL at ${fmt((100 * sh.value.mbPerSec) / s.value.mbPerSec, 0)}% of one PostgreSQL`] : []),
        ...(s?.ok && dl?.ok
          ? [
              `diskless at ${fmt((100 * dl.value.mbPerSec) / s.value.mbPerSec, 0)}% of the PostgreSQL WAL, its PostgreSQL CPU per MB ${fmt(s.value.pgCpuMsPerMb! / dl.value.pgCpuMsPerMb!, 1)}× lower (target ≥ 20×: ${s.value.pgCpuMsPerMb! >= 20 * dl.value.pgCpuMsPerMb! ? 'met' : 'not met'})`,
            ]
          : []),
      ];
      rows.push({
        group: 'storage',
        scenario: 'storage-produce',
        title,
        flowmq: cell(e, show),
        peer: cell(s, show),
        ...(EXTRA_CONFIGS.length > 0 ? { extra: EXTRA_CONFIGS.map((id) => cell(r.get(id), show)) } : {}),
        ratio: ratios.length > 0 ? ratios.join('; ') : '-',
        data: { options: o, embedded: e, shared: s, sharded: sh, diskless: dl },
      });
    },
  },
  {
    name: 'storage-latency',
    group: 'storage',
    title: "produce-ack latency at half of each configuration's own peak",
    run: async () => {
      const r = await perConfig(latencyRun);
      const show = (v: Awaited<ReturnType<typeof latencyRun>>) => {
        const q = v.r.queuedBatches > 0 ? `; ${fmt((100 * v.r.queuedBatches) / Math.max(1, v.r.produceAck.count), 0)}% waited for an in-flight slot` : '';
        const bs = v.bs.p50 !== null && v.bs.p99 !== null ? `; broker-side (incl. warm-up) ≤ ${fmt(v.bs.p50, 1)} / ≤ ${fmt(v.bs.p99, 1)} ms` : '';
        const rate = process.env.BENCH_STORAGE_LATENCY_MBPS
          ? 'rate set by BENCH_STORAGE_LATENCY_MBPS'
          : `half of ${fmt(v.peakMbPerSec, 1)}${v.calibrated ? ', a 3 s calibration' : ''}`;
        return `${fmt(v.r.produceAck.p50, 1)} / ${fmt(v.r.produceAck.p99, 1)} ms at ${fmt(v.r.achievedMbPerSec, 1)} MB/s (${rate}${q}${bs})`;
      };
      const verdicts = SHOWN_CONFIGS.map((c) => {
        const o = r.get(c.id);
        const name = { embedded: 'embedded', shared: 'PostgreSQL', sharded: 'sharded PostgreSQL', diskless: 'diskless' }[c.id];
        return `${name} p99 < ${c.p99TargetMs} ms: ${o?.ok ? (o.value.r.produceAck.p99 < c.p99TargetMs ? 'met' : 'not met') : 'not measured'}`;
      });
      rows.push({
        group: 'storage',
        scenario: 'storage-latency',
        title: `produce → ack latency p50 / p99, producers only, ${process.env.BENCH_STORAGE_LATENCY_MBPS ? `at ${process.env.BENCH_STORAGE_LATENCY_MBPS} MB/s (BENCH_STORAGE_LATENCY_MBPS; the targets are set at half of each one's peak)` : "at half of each configuration's own peak"}: a batch per partition every ${CFG.kafkaLingerMs} ms, ≤ ${CFG.kafkaInflight} in flight per connection`,
        flowmq: cell(r.get('embedded'), show),
        peer: cell(r.get('shared'), show),
        ...(EXTRA_CONFIGS.length > 0 ? { extra: EXTRA_CONFIGS.map((id) => cell(r.get(id), show)) } : {}),
        ratio: verdicts.join('; '),
        data: { embedded: r.get('embedded'), shared: r.get('shared'), sharded: r.get('sharded'), diskless: r.get('diskless') },
      });
    },
  },
  {
    name: 'storage-replay',
    group: 'storage',
    title: 'cold replay from the object store',
    run: async () => {
      const r = await perConfig(replayRun, ['embedded', 'shared']);
      const show = (v: ReplayRun) =>
        `${fmt(v.replay.mbPerSec, 1)} MB/s (${fmt(v.producedMb, 0)} MB in ${fmt(v.segments)} segments read in ${fmt(v.replay.seconds, 1)} s, ${fmt(v.replay.fetches)} fetches)`;
      const s = r.get('shared');
      rows.push({
        group: 'storage',
        scenario: 'storage-replay',
        title: `cold replay: ${fmt(CFG.replayMb)} MB of 1 KiB records in ${CFG.kafkaPartitions} partitions, sealed into ${CFG.replaySegment} segment objects (flush), broker restarted, then read from offset 0 by one Fetch v4 consumer per partition (MB/s of record values)`,
        flowmq: cell(r.get('embedded'), show),
        peer: cell(s, show),
        ratio: `S3 ≥ ${REPLAY_TARGET_MBPS} MB/s: ${s?.ok ? (s.value.replay.mbPerSec >= REPLAY_TARGET_MBPS ? 'met' : 'not met') : 'not measured'}`,
        data: { options: { mb: CFG.replayMb, segment: CFG.replaySegment, partitionMaxBytes: CFG.replayFetchBytes }, embedded: r.get('embedded'), shared: s },
      });
    },
  },
  {
    name: 'storage-compaction',
    group: 'storage',
    title: 'log compaction: cleaner MB/s and produce p99 while it runs',
    run: async () => {
      const mb = Number(process.env.BENCH_COMPACTION_MB ?? 128);
      const pace = Number(process.env.BENCH_COMPACTION_BYTES_PER_SEC ?? 0);
      let cellText: string;
      let ratio = '-';
      let data: Record<string, unknown>;
      try {
        const r = await measureCompaction({ bytes: mb * 1024 * 1024, bytesPerSec: pace, seconds: CFG.seconds });
        cellText = `${fmt(r.mbPerSec, 0)} MB/s (${fmt(r.writtenMb, 0)} MB in ${fmt(r.segments)} segments cleaned in ${fmt(r.passSeconds, 2)} s, ${fmt(r.savedMb, 0)} MB saved); produce → ack p50 / p99 ${fmt(r.baseline.p50, 2)} / ${fmt(r.baseline.p99, 2)} ms without, ${fmt(r.during.p50, 2)} / ${fmt(r.during.p99, 2)} ms during`;
        ratio = `p99 during / without: ${fmt(r.during.p99 / r.baseline.p99, 1)}×`;
        data = { ...r };
      } catch (e) {
        cellText = `error: ${errText(e)}`;
        data = { error: errText(e) };
      }
      rows.push({
        group: 'storage',
        scenario: 'storage-compaction',
        title: `log compaction (embedded log engine, fs objects): ${mb} MiB of 1 KiB records over 10,000 keys in 4 MiB segments, one cleaner pass ${pace > 0 ? `paced to ${fmt(pace / 1e6, 0)} MB/s (BENCH_COMPACTION_BYTES_PER_SEC)` : 'unpaced'}, while one producer appends 4 KiB batches to another stream awaiting each ack (WAL fsync on)`,
        flowmq: cellText,
        peer: '-',
        ratio,
        data,
      });
    },
  },
  {
    name: 'queue-store',
    group: 'storage',
    title: 'queue store alone: persistent 1 KiB appends to one queue, embedded vs PostgreSQL',
    run: async () => {
      const o = defaultQueueStoreOptions(CFG.seconds);
      const title = `queue store alone (no broker): 1 KiB appends to one queue by N publishers each awaiting its append (as a confirm), N = ${o.levels.join(', ')}, then ${o.ackLevel} publishers that also remove (ack) each message once its append resolved, then before (early: elided); appends/s and append → resolved p50 / p99`;
      const outcome = async (run: () => Promise<QueueStoreLevel[]>): Promise<Outcome<QueueStoreLevel[]>> => {
        try {
          return { ok: true, value: await run() };
        } catch (e) {
          return { ok: false, error: errText(e) };
        }
      };
      const e = await outcome(() => queueStoreEmbedded(o));
      const p = await outcome(() => queueStorePostgres(o));
      const show = (o: Outcome<QueueStoreLevel[]>) => (o.ok ? o.value.map(levelCell).join('; ') : `error: ${o.error}`);
      const top = (o: Outcome<QueueStoreLevel[]>) => (o.ok ? Math.max(...o.value.map((l) => l.appendsPerSec)) : 0);
      rows.push({
        group: 'storage',
        scenario: 'queue-store',
        title,
        flowmq: `SQLite worker, synchronous=FULL: ${show(e)}`,
        peer: `PostgreSQL, fsync on: ${show(p)}`,
        ratio: e.ok && p.ok ? `PostgreSQL peak at ${fmt((100 * top(p)) / top(e), 0)}% of embedded` : '-',
        data: { options: o, embedded: e, postgres: p },
      });
    },
  },
  amqpScenario(true),
  amqpScenario(false),
  amqpFairnessScenario(),
  natsPubSubScenario('nats-pubsub-16', 16, 1, false),
  natsPubSubScenario('nats-pubsub-1k', 1024, 1, false),
  natsPubSubScenario('nats-fanout-16', 16, CFG.natsFanout, false),
  natsPubSubScenario('nats-fanout-1k', 1024, CFG.natsFanout, false),
  natsPubSubScenario('nats-queue', CFG.natsQueuePayloadBytes, CFG.natsQueueMembers, true),
  natsRequestScenario('nats-request', 1),
  natsRequestScenario('nats-request-pipelined', CFG.natsRequestInflight),
  natsRestartScenario(),
  ...clusterScenarios(),
  ...idleScenarios(),
];

/** How soon a restarted broker serves NATS clients again (bench/startup.ts); issue 28's target: within 300 ms. */
function natsRestartScenario(): Scenario {
  const title = 'restart on kept data: spawn to the NATS INFO line, median / max of 5 restarts (ms)';
  const cell = (r: StartupResult) => `${fmt(r.natsInfoMs.p50, 0)} / ${fmt(r.natsInfoMs.max, 0)} ms`;
  return {
    name: 'nats-restart',
    group: 'nats',
    title,
    run: async () => {
      const outcome = (p: Promise<StartupResult>): Promise<Outcome<StartupResult>> =>
        p.then(
          (value) => ({ ok: true, value }),
          (e: unknown) => ({ ok: false, error: errText(e) }),
        );
      const f = await outcome(flowmqRestarts());
      const n = NATS_SERVER ? await outcome(natsServerRestarts(NATS_SERVER)) : null;
      const others = f.ok
        ? Object.entries(f.value.listenersMs ?? {})
            .map(([k, v]) => `${k} ${fmt(v, 0)}`)
            .join(', ')
        : '';
      rows.push({
        group: 'nats',
        scenario: 'nats-restart',
        title,
        flowmq: f.ok ? `${cell(f.value)} (other listeners accept at, median: ${others} ms)` : `error: ${f.error}`,
        peer: n === null ? NATS_SERVER_MISSING : n.ok ? cell(n.value) : `error: ${n.error}`,
        ratio: f.ok
          ? `median ${f.value.natsInfoMs.p50 <= 300 ? '≤' : '>'} 300 ms target${n?.ok ? `; ${ratio(f.value.natsInfoMs.p50, n.value.natsInfoMs.p50)} nats-server's` : ''}`
          : '-',
        data: { flowmq: f, natsServer: n },
      });
    },
  };
}

// ------------------------------------------------------------------ cluster scenarios (bench/cluster.ts)

function clusterScenarios(): Scenario[] {
  const scaleTitle = 'cluster produce: 1 KiB records, batches of 50, acks=all, 6 partitions, 12 senders to the leaders; 1, 2, 3 brokers on this machine';
  const fwdTitle = 'cluster forwarding: MQTT QoS 1 publishes (256 B, 50 in flight) into a 1-partition stream, client on the owner vs on another broker';
  const foTitle = `cluster failover: kill -9 of a partition owner under an idempotent producer (6 partitions, lease ${CFG.clusterLeaseMs} ms)`;
  const cpuCell = (r: ScalingResult) => r.cpu.map((c) => `b${c.broker} ${fmt(c.usPerMessage, 0)} (${fmt(c.netUsPerMessage, 0)} above idle)`).join(', ');
  return [
    {
      name: 'cluster-scaling',
      group: 'cluster',
      title: scaleTitle,
      run: async () => {
        const results: Outcome<ScalingResult>[] = [];
        for (const n of [1, 2, 3]) {
          try {
            results.push({
              ok: true,
              value: await clusterScaling(n, { seconds: CFG.seconds, warmupS: CFG.warmupS, partitions: 6, senders: 12, batch: 50, recordBytes: 1024 }),
            });
          } catch (e) {
            results.push({ ok: false, error: errText(e) });
          }
        }
        const show = (o: Outcome<ScalingResult>, n: number) =>
          o.ok
            ? `${n} broker${n > 1 ? 's' : ''}: ${fmt(o.value.recordsPerSec)} records/s, send p50 / p99 ${fmt(o.value.sendLatencyMs.p50, 1)} / ${fmt(o.value.sendLatencyMs.p99, 1)} ms${o.value.errors ? `, ${o.value.errors} errors` : ''}; CPU µs/message per broker: ${cpuCell(o.value)} (sum ${fmt(o.value.usPerMessageTotal, 0)}, ${fmt(o.value.netUsPerMessageTotal, 0)} above idle)`
            : `${n}: error: ${o.error}`;
        const one = results[0];
        const three = results[2];
        rows.push({
          group: 'cluster',
          scenario: 'cluster-scaling',
          title: scaleTitle,
          flowmq: results.map((r, i) => show(r, i + 1)).join('; '),
          peer: '-',
          ratio:
            one?.ok && three?.ok
              ? `busiest broker's CPU per message, 3 brokers vs 1: ${fmt((100 * three.value.usPerMessageMax) / one.value.usPerMessageMax, 0)}% (above idle: ${fmt((100 * three.value.netUsPerMessageMax) / one.value.netUsPerMessageMax, 0)}%)`
              : '-',
          data: { results },
        });
      },
    },
    {
      name: 'cluster-forwarding',
      group: 'cluster',
      title: fwdTitle,
      run: async () => {
        let r: Outcome<ForwardingResult>;
        try {
          r = { ok: true, value: await clusterForwarding({ seconds: CFG.seconds, warmupS: CFG.warmupS, window: 50, payloadBytes: 256 }) };
        } catch (e) {
          r = { ok: false, error: errText(e) };
        }
        const side = (s: ForwardingResult['sides'][number]) =>
          `client on ${s.client} (b${s.broker}): ${fmt(s.publishesPerSec)} publishes/s, ack p50 / p99 ${fmt(s.ackMs.p50, 1)} / ${fmt(s.ackMs.p99, 1)} ms, CPU µs/message ${s.cpu.map((c) => `b${c.broker} ${fmt(c.usPerMessage, 0)} (${fmt(c.netUsPerMessage, 0)} above idle)`).join(', ')}`;
        const owner = r.ok ? r.value.sides.filter((s) => s.client === 'owner') : [];
        const fwd = r.ok ? r.value.sides.find((s) => s.client === 'non-owner') : undefined;
        const ownerRate = owner.length > 0 ? owner.reduce((n, s) => n + s.publishesPerSec, 0) / owner.length : 0;
        rows.push({
          group: 'cluster',
          scenario: 'cluster-forwarding',
          title: fwdTitle,
          flowmq: r.ok ? r.value.sides.map(side).join('; ') : `error: ${r.error}`,
          peer: '-',
          ratio:
            fwd && ownerRate > 0 ? `forwarded at ${fmt((100 * fwd.publishesPerSec) / ownerRate, 0)}% of the owner's rate (mean of the two owner runs)` : '-',
          data: { result: r },
        });
      },
    },
    {
      name: 'cluster-failover',
      group: 'cluster',
      title: foTitle,
      run: async () => {
        let r: Outcome<FailoverResult>;
        try {
          r = { ok: true, value: await clusterFailover({ leaseMs: CFG.clusterLeaseMs, partitions: 6, afterS: 2 }) };
        } catch (e) {
          r = { ok: false, error: errText(e) };
        }
        const v = r.ok ? r.value : null;
        rows.push({
          group: 'cluster',
          scenario: 'cluster-failover',
          title: foTitle,
          flowmq: v
            ? `broker ${v.victim} (partitions ${v.victimPartitions.join(',')}) killed: all served again after ${v.failoverMs === null ? 'never (timed out)' : `${fmt(v.failoverMs / 1000, 1)} s`}; ${fmt(v.acked)} records acknowledged, ${v.lost} lost, ${v.duplicates} duplicated, ${v.outOfOrder} out of order; ${v.failedSends} failed sends`
            : `error: ${r.ok ? '' : r.error}`,
          peer: '-',
          ratio: v
            ? `target < 10 s and nothing lost: ${v.failoverMs !== null && v.failoverMs < 10_000 && v.lost === 0 && v.duplicates === 0 ? 'met' : 'NOT met'}`
            : '-',
          data: { result: r },
        });
      },
    },
  ];
}

// ------------------------------------------------------------------ idle connections

/** Issue 24's target for an idle connection of any protocol, KiB of RSS. */
const IDLE_TARGET_KIB = 2;

/** The Node.js floor measured by `idle-floor` in this run (the other idle rows are shown as floor + the rest). */
let idleFloor: IdleResult | null = null;

interface IdleTarget {
  pid: number;
  port: number;
  stop(): Promise<void>;
}

const processAlive = (pid: number) => () => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** A fresh FlowMQ with the listener `protocol` needs. */
async function flowmqIdleTarget(protocol: IdleProtocol): Promise<IdleTarget> {
  if (protocol === 'amqp') {
    const b = await startFlowmq(FLOWMQ_AMQP_ARGS);
    try {
      await waitAmqp(b.amqpPort, 30_000, processAlive(b.pid));
    } catch (e) {
      await b.stop();
      throw e;
    }
    return { pid: b.pid, port: b.amqpPort, stop: () => b.stop() };
  }
  if (protocol === 'nats') {
    const port = await freePort();
    const b = await startFlowmq(flowmqNatsArgs(port));
    try {
      await waitNatsInfo(port, 30_000, processAlive(b.pid));
    } catch (e) {
      await b.stop();
      throw e;
    }
    return { pid: b.pid, port, stop: () => b.stop() };
  }
  const b = await startFlowmq();
  return { pid: b.pid, port: protocol === 'kafka' ? b.kafkaPort : b.mqttPort, stop: () => b.stop() };
}

/** The same protocol's peer broker, when the bench has one and it is installed; else why not. */
async function peerIdleTarget(protocol: IdleProtocol): Promise<IdleTarget | string> {
  if (protocol === 'mqtt' || protocol === 'mqtt-persistent') {
    if (!MOSQUITTO) return 'mosquitto not installed';
    const b = await startMosquitto(MOSQUITTO);
    return { pid: b.pid, port: b.mqttPort, stop: () => b.stop() };
  }
  if (protocol === 'amqp') {
    if (!RABBITMQ_BIN) return RABBITMQ_MISSING;
    const r = await startRabbitmq(RABBITMQ_BIN);
    if (r.beamPid === null) {
      await r.stop();
      return 'RabbitMQ started, but its Erlang VM (whose memory is measured) was not found';
    }
    return { pid: r.beamPid, port: r.amqpPort, stop: () => r.stop() };
  }
  if (protocol === 'nats') {
    if (!NATS_SERVER) return 'nats-server not installed';
    const n = await startNatsServer(NATS_SERVER);
    return { pid: n.pid, port: n.port, stop: () => n.stop() };
  }
  return 'no Kafka broker in the bench';
}

type IdleOutcome = Outcome<IdleResult & { note?: string }> | { ok: false; skipped: string };

/** Measures `n` idle connections on the broker `start` starts (a string: there is none, and why), then stops it. */
async function idleOn(start: () => Promise<IdleTarget | string>, protocol: IdleProtocol, n: number): Promise<IdleOutcome> {
  let t: IdleTarget | null = null;
  try {
    const started = await start();
    if (typeof started === 'string') return { ok: false, skipped: started };
    t = started;
    let conns = n;
    let note: string | undefined;
    const limit = nofile(t.pid) - 100;
    if (limit < conns) {
      conns = Math.max(0, limit);
      note = `the broker may open only ${nofile(t.pid)} files: ${fmt(conns)} connections`;
    }
    return { ok: true, value: { ...(await measureIdle(protocol, t.pid, t.port, conns)), note } };
  } catch (e) {
    console.error(`  ${protocol}: ${errText(e)}`);
    return { ok: false, error: errText(e) };
  } finally {
    await t?.stop();
  }
}

const kib = (n: number) => fmt(n, 1);
const idleFailure = (o: IdleOutcome) => (o.ok ? '' : 'skipped' in o ? o.skipped : `error: ${o.error}`);

function idleCell(r: IdleResult & { note?: string }, floor: IdleResult | null): string {
  const parts = floor !== null ? ` = floor ${kib(floor.kibPerConnection)} + ${kib(r.kibPerConnection - floor.kibPerConnection)}` : '';
  return (
    `${kib(r.kibPerConnection)} KiB/conn${parts} (0 → ${fmt(r.connections)}: ${kib(r.kibPerConnectionFromZero)}; ` +
    `RSS ${fmt(r.rssKiB[0] / 1024, 0)} → ${fmt(r.rssKiB[2] / 1024, 0)} MiB${r.note ? `; ${r.note}` : ''})`
  );
}

function idleScenario(name: string, protocol: IdleProtocol, what: string, peerName: string): Scenario {
  const title = () => `${what}: ${fmt(CFG.idleConnections)} idle connections`;
  return {
    name,
    group: 'idle',
    title: title(),
    run: async () => {
      const f = await idleOn(() => flowmqIdleTarget(protocol), protocol, CFG.idleConnections);
      const p = await idleOn(() => peerIdleTarget(protocol), protocol, CFG.idleConnections);
      const target = (k: number) => `target ≤ ${IDLE_TARGET_KIB} KiB: ${k <= IDLE_TARGET_KIB ? 'met' : 'NOT met'}`;
      rows.push({
        group: 'idle',
        scenario: name,
        title: title(),
        flowmq: f.ok ? idleCell(f.value, idleFloor) : idleFailure(f),
        peer: p.ok ? `${peerName}: ${idleCell(p.value, null)}` : idleFailure(p),
        ratio: f.ok ? (p.ok ? `${ratio(f.value.kibPerConnection, p.value.kibPerConnection)}; ` : '') + target(f.value.kibPerConnection) : '-',
        data: { protocol, connections: CFG.idleConnections, flowmq: f, peer: p, floor: idleFloor },
      });
    },
  };
}

function idleScenarios(): Scenario[] {
  const floorTitle = () =>
    `Node.js floor: a net.Server answering the MQTT handshake with fixed bytes, keeping only the sockets: ${fmt(CFG.idleConnections)} idle connections`;
  return [
    {
      name: 'idle-floor',
      group: 'idle',
      title: floorTitle(),
      run: async () => {
        const r = await idleOn(() => startFloor(), 'mqtt', CFG.idleConnections);
        idleFloor = r.ok ? r.value : null;
        rows.push({
          group: 'idle',
          scenario: 'idle-floor',
          title: floorTitle(),
          flowmq: r.ok ? idleCell(r.value, null) : idleFailure(r),
          peer: '-',
          ratio: r.ok
            ? `the floor of any Node.js broker; target ≤ ${IDLE_TARGET_KIB} KiB: ${r.value.kibPerConnection <= IDLE_TARGET_KIB ? 'met' : 'NOT met'}`
            : '-',
          data: { floor: r },
        });
      },
    },
    idleScenario(
      'idle-mqtt',
      'mqtt',
      'MQTT: CONNECT (clean session), one SUBSCRIBE to a filter of its own',
      `Mosquitto ${MOSQUITTO ? mosquittoVersion(MOSQUITTO) : ''}`.trim(),
    ),
    idleScenario(
      'idle-mqtt-persistent',
      'mqtt-persistent',
      'MQTT: CONNECT (clean session 0: a persistent session), one SUBSCRIBE',
      `Mosquitto ${MOSQUITTO ? mosquittoVersion(MOSQUITTO) : ''}`.trim(),
    ),
    idleScenario('idle-kafka', 'kafka', 'Kafka: ApiVersions, Metadata', '-'),
    idleScenario('idle-amqp', 'amqp', 'AMQP 0-9-1: connection open (heartbeats on), one channel', `RabbitMQ ${RABBITMQ_VERSION ?? ''}`.trim()),
    idleScenario('idle-nats', 'nats', 'NATS: CONNECT, one SUB, PING/PONG', `nats-server ${NATS_SERVER_VERSION ?? ''}`.trim()),
  ];
}

function usage(): string {
  return [
    'usage: npm run bench [-- SELECTION...]',
    '  SELECTION: mqtt | kafka | storage | amqp | nats | cluster | idle | a scenario name (default: everything)',
    '  scenarios:',
    ...scenarios.map((s) => `    ${s.name.padEnd(16)} ${s.title}`),
  ].join('\n');
}

function select(args: string[]): Scenario[] {
  if (args.length === 0 || args.includes('all')) return scenarios;
  const out = new Set<Scenario>();
  for (const a of args) {
    const hit = scenarios.filter(
      (s) =>
        s.group === a ||
        s.name === a ||
        s.name === `mqtt-${a}` ||
        s.name === `kafka-${a}` ||
        s.name === `storage-${a}` ||
        s.name === `amqp-${a}` ||
        s.name === `nats-${a}` ||
        s.name === `cluster-${a}`,
    );
    if (hit.length === 0) throw new Error(`unknown selection "${a}"\n${usage()}`);
    for (const h of hit) out.add(h);
  }
  return scenarios.filter((s) => out.has(s));
}

// ------------------------------------------------------------------ descriptor limit

/**
 * The idle scenario needs ~10,000 sockets in this process. Node cannot raise its own RLIMIT_NOFILE, so when the
 * soft limit is too low the bench re-executes itself under `sh -c 'ulimit -n …'` (once).
 */
function reexecWithDescriptors(needed: number): Promise<number> | null {
  if (process.env.BENCH_REEXEC === '1') return null;
  const soft = Number(spawnSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).stdout.trim());
  if (!Number.isFinite(soft) || soft >= needed) return null;
  const script = `ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$@"`;
  const child = spawn('sh', ['-c', script, 'sh', process.execPath, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, BENCH_REEXEC: '1' },
  });
  // Ctrl-C reaches the child through the terminal's process group; a SIGTERM sent to us alone is passed on.
  process.on('SIGINT', () => undefined);
  process.on('SIGTERM', () => child.kill('SIGTERM'));
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 + 15 : 1))));
}

function descriptorLimit(): number {
  return nofile(process.pid);
}

// ------------------------------------------------------------------ main

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h') || args.includes('--list')) {
    console.log(usage());
    return;
  }
  const selected = select(args);
  const wantsIdle = selected.some((s) => s.group === 'idle');
  const wantsFlood = selected.some((s) => s.name.endsWith('-flood-memory'));
  const needed = Math.max(wantsIdle ? CFG.idleConnections : 0, wantsFlood ? CFG.floodConnections : 0) + CFG.fanoutSubscribers + 1000;
  const child = reexecWithDescriptors(needed);
  if (child) {
    process.exitCode = await child;
    return;
  }
  const limit = descriptorLimit();
  if (wantsIdle && limit < needed) {
    CFG.idleConnections = Math.max(100, limit - CFG.fanoutSubscribers - 1000);
    console.log(`note: this process may open only ${limit} files; idle scenario reduced to ${CFG.idleConnections} connections`);
  }
  if (wantsFlood && limit < CFG.floodConnections + CFG.fanoutSubscribers + 1000) {
    CFG.floodConnections = Math.max(100, limit - CFG.fanoutSubscribers - 1000);
    console.log(`note: this process may open only ${limit} files; floods reduced to ${CFG.floodConnections} connections`);
  }

  let interrupted = false;
  const onSignal = (sig: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    console.error(`\n${sig}: stopping brokers and removing temporary files`);
    void cleanupAll().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const mosqVersion = MOSQUITTO ? mosquittoVersion(MOSQUITTO) : null;
  const started = new Date();
  const loadAtStart = loadavg();
  console.log(
    `FlowMQ benchmarks — ${selected.map((s) => s.name).join(', ')}\n` +
      `${CFG.warmupS}s warm-up + ${CFG.seconds}s measured per scenario; ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), ` +
      `node ${process.version}, mosquitto ${mosqVersion ?? 'not installed'}, rabbitmq-server ${RABBITMQ_VERSION ?? 'not installed'}, nats-server ${NATS_SERVER_VERSION ?? 'not installed'}; load generator and brokers share the machine; ` +
      `load average ${loadAtStart.map((l) => l.toFixed(2)).join(' ')}` +
      (selected.some((s) => s.group === 'amqp') ? `; AMQP scenarios: ${CFG.amqpWarmupS}s warm-up + ${CFG.amqpSeconds}s measured` : '') +
      (selected.some((s) => s.group === 'nats') ? `; NATS scenarios: ${CFG.natsWarmupS}s warm-up + ${CFG.natsSeconds}s measured` : '') +
      '\n',
  );

  const t0 = nowS();
  for (const s of selected) {
    const ts = nowS();
    process.stdout.write(`- ${s.name} … `);
    await s.run();
    console.log(`${fmt(nowS() - ts, 0)} s`);
  }
  console.log(`\nfinished in ${fmt(nowS() - t0, 0)} s\n`);

  const groups: [Group, string[]][] = [
    ['mqtt', ['MQTT scenario', 'FlowMQ', `Mosquitto ${mosqVersion ?? ''}`.trim(), 'FlowMQ / Mosquitto']],
    ['kafka', ['Kafka scenario', 'FlowMQ', 'this machine', 'FlowMQ vs machine / target']],
    ['storage', ['Storage scenario', ...SHOWN_CONFIGS.map((c) => c.label), 'target']],
    ['amqp', ['AMQP scenario', 'FlowMQ', `RabbitMQ ${RABBITMQ_VERSION ?? '(not installed)'}`, 'FlowMQ / RabbitMQ, target']],
    ['nats', ['NATS scenario', 'FlowMQ', `nats-server ${NATS_SERVER_VERSION ?? '(not installed)'}`, 'FlowMQ / nats-server, target']],
    ['cluster', ['Cluster scenario', 'FlowMQ', '-', 'scaling / target']],
    ['idle', ['Idle connections: broker RSS growth per connection (lower is better)', 'FlowMQ', 'peer', `FlowMQ / peer; target ≤ ${IDLE_TARGET_KIB} KiB`]],
  ];
  for (const [g, header] of groups) {
    const rs = rows.filter((r) => r.group === g);
    if (rs.length === 0) continue;
    console.log(
      table(
        header,
        // A row without the extra cells of its group's header (a storage scenario the sharded and diskless configurations skip): '-'.
        rs.map((r) => [r.title, r.flowmq, r.peer, ...(r.extra ?? Array.from({ length: header.length - 4 }, () => '-')), r.ratio]),
      ) + '\n',
    );
  }

  const out = join(ROOT, 'bench/results');
  mkdirSync(out, { recursive: true });
  const json = {
    date: started.toISOString(),
    durationSeconds: nowS() - t0,
    loadAverage: { start: loadAtStart, end: loadavg() },
    machine: {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? null,
      memoryBytes: totalmem(),
      platform: `${process.platform}/${process.arch}`,
      node: process.version,
      mosquitto: mosqVersion,
      rabbitmq: RABBITMQ_VERSION,
      natsServer: NATS_SERVER_VERSION,
    },
    settings: { ...CFG, mqttLimits: MQTT_LIMITS, natsLimits: NATS_LIMITS, selection: selected.map((s) => s.name) },
    results: rows.map((r) => ({ group: r.group, scenario: r.scenario, title: r.title, table: { flowmq: r.flowmq, peer: r.peer, ratio: r.ratio }, ...r.data })),
  };
  writeFileSync(join(out, 'latest.json'), JSON.stringify(roundDeep(json), null, 2) + '\n');
  console.log(`results written to ${join('bench/results', 'latest.json')}`);
}

main()
  .catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  })
  .finally(async () => {
    await cleanupAll();
    // Nothing of the run may keep the process alive (stdout is synchronous for files and pipes on Linux).
    process.exit();
  });
