/**
 * The soak runner (`npm run soak`, bench/soak.ts): steady mixed traffic on all four protocols against one broker for a
 * set time, sampled at a fixed interval, and a growth check at the end.
 *
 * Traffic, each at `rate` messages/s, at most 64 in flight per protocol (a tick finding 64 waiting is skipped and
 * counted): a KafkaJS producer (acks=all) into a 3-partition topic read by a consumer group; MQTT.js QoS 1 publishes
 * read back by a QoS 1 subscriber; amqplib confirms into a durable queue read by an acking consumer; core NATS
 * publishes read back by a subscriber of the same connection. The latency of a message is from its send to its
 * acknowledgement (Kafka produce response, PUBACK, confirm) or, for NATS, to its delivery.
 *
 * Each sample: throughput (acknowledged per second over the interval, all protocols), p99 latency over the interval,
 * and from the broker's /metrics its RSS, event-loop lag p99 (prom-client's, reset at every scrape), active handles,
 * open file descriptors and connections. Growth check: the least-squares slope of RSS and of handles over the second
 * half of the run (the first half is warm-up: caches filling); beyond the thresholds the run fails.
 */
import amqplib from 'amqplib';
import kafkajs from 'kafkajs';
import mqtt from 'mqtt';
import { connect as natsConnect } from '@nats-io/transport-node';
import { FlowmqProcess, sleep } from '../../test/e2e/harness.js';
import { startCluster, type TestCluster } from '../../test/helpers/cluster.js';

const { Kafka, logLevel } = kafkajs;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

export interface SoakOptions {
  /** Run time, minutes (fractions allowed). */
  minutes: number;
  /** Messages per second per protocol. */
  rate: number;
  /** Seconds between samples. */
  sampleSeconds: number;
  /** Growth thresholds over the second half: RSS MiB per minute, handles per minute. */
  maxRssMibPerMin: number;
  maxHandlesPerMin: number;
  /** Extra broker arguments. */
  brokerArgs?: string[];
  /**
   * Three brokers in cluster mode (test/helpers/cluster.ts: PostgreSQL, s3rver) instead of one: each protocol's
   * sender and receiver on different brokers, the samples summed over the brokers (RSS, handles, descriptors,
   * connections; the event-loop lag is the worst broker's).
   */
  cluster?: boolean;
  log?: (line: string) => void;
}

export interface SoakSample {
  /** Seconds since the traffic started. */
  t: number;
  throughput: number;
  p99Ms: number;
  rssMib: number;
  /** V8's heap in use, memory outside it (Buffers), and the object block cache's bytes: where RSS growth is. */
  heapMib: number;
  externalMib: number;
  objectCacheMib: number;
  lagP99Ms: number;
  handles: number;
  fds: number;
  connections: number;
}

export interface SoakResult {
  samples: SoakSample[];
  acked: number;
  skipped: number;
  errors: number;
  rssSlopeMibPerMin: number;
  handlesSlopePerMin: number;
  failures: string[];
}

const MAX_IN_FLIGHT = 64;

/** One protocol's sender: `send()` resolves when the message is acknowledged (or delivered). */
interface Lane {
  name: string;
  send(i: number): Promise<void>;
  close(): Promise<void>;
}

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

async function kafkaLane(broker: FlowmqProcess, reader: FlowmqProcess): Promise<Lane> {
  const kafka = new Kafka({ brokers: [broker.kafka], clientId: 'soak', logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: 'soak.kafka', numPartitions: 3 }] });
  await admin.disconnect();
  const producer = kafka.producer();
  await producer.connect();
  const consumer = new Kafka({ brokers: [reader.kafka], clientId: 'soak-reader', logLevel: logLevel.NOTHING }).consumer({ groupId: 'soak' });
  await consumer.connect();
  await consumer.subscribe({ topic: 'soak.kafka', fromBeginning: true });
  await consumer.run({ eachMessage: async () => undefined });
  return {
    name: 'kafka',
    send: async (i) => {
      await producer.send({ topic: 'soak.kafka', acks: -1, messages: [{ key: `k${i % 7}`, value: `kafka-${i}` }] });
    },
    close: async () => {
      await consumer.disconnect();
      await producer.disconnect();
    },
  };
}

async function mqttLane(broker: FlowmqProcess, reader: FlowmqProcess): Promise<Lane> {
  const pub = await mqtt.connectAsync(`mqtt://127.0.0.1:${broker.ports.mqtt}`, { clientId: 'soak-pub', reconnectPeriod: 0 });
  const sub = await mqtt.connectAsync(`mqtt://127.0.0.1:${reader.ports.mqtt}`, { clientId: 'soak-sub', reconnectPeriod: 0 });
  await sub.subscribeAsync('soak/mqtt/#', { qos: 1 });
  return {
    name: 'mqtt',
    send: async (i) => {
      await pub.publishAsync(`soak/mqtt/${i % 5}`, `mqtt-${i}`, { qos: 1 });
    },
    close: async () => {
      await pub.endAsync();
      await sub.endAsync();
    },
  };
}

async function amqpLane(broker: FlowmqProcess, reader: FlowmqProcess): Promise<Lane> {
  const conn = await amqplib.connect(`amqp://127.0.0.1:${broker.ports.amqp}`);
  const ch = await conn.createConfirmChannel();
  await ch.assertQueue('soak.amqp', { durable: true });
  const rconn = reader === broker ? conn : await amqplib.connect(`amqp://127.0.0.1:${reader.ports.amqp}`);
  const cch = await rconn.createChannel();
  await cch.prefetch(100);
  await cch.consume('soak.amqp', (m) => {
    if (m !== null) cch.ack(m);
  });
  return {
    name: 'amqp',
    send: (i) =>
      new Promise<void>((resolve, reject) => {
        ch.sendToQueue('soak.amqp', Buffer.from(`amqp-${i}`), { persistent: true }, (err) => (err ? reject(err as Error) : resolve()));
      }),
    close: async () => {
      await conn.close();
      if (rconn !== conn) await rconn.close();
    },
  };
}

async function natsLane(broker: FlowmqProcess, reader: FlowmqProcess): Promise<Lane> {
  const nc = await natsConnect({ servers: `127.0.0.1:${broker.ports.nats}` });
  const rc = reader === broker ? nc : await natsConnect({ servers: `127.0.0.1:${reader.ports.nats}` });
  const waiting = new Map<number, () => void>();
  const sub = rc.subscribe('soak.nats.>', {
    callback: (_err, msg) => {
      const i = Number(msg.string().slice(5));
      waiting.get(i)?.();
      waiting.delete(i);
    },
  });
  await rc.flush();
  return {
    name: 'nats',
    send: (i) => {
      const d = deferred();
      waiting.set(i, d.resolve);
      nc.publish(`soak.nats.${i % 5}`, `nats-${i}`);
      return d.promise;
    },
    close: async () => {
      sub.unsubscribe();
      await nc.close();
      if (rc !== nc) await rc.close();
    },
  };
}

/** Least-squares slope of y over x. */
export function slope(xs: number[], ys: number[]): number {
  const n = xs.length;
  if (n < 2) return 0;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my);
    den += (xs[i] - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

function p99(values: number[]): number {
  if (values.length === 0) return 0;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))];
}

/** The broker's metrics of interest, by name (labelled series summed). */
async function scrape(broker: FlowmqProcess): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${broker.ports.http}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue;
    const name = line.split(/[{ ]/)[0];
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(v)) out.set(name, (out.get(name) ?? 0) + v);
  }
  return out;
}

/** Checks the growth of the second half's samples against the thresholds. */
export function growth(samples: SoakSample[], opts: Pick<SoakOptions, 'maxRssMibPerMin' | 'maxHandlesPerMin'>) {
  const half = samples.slice(Math.floor(samples.length / 2));
  const mins = half.map((s) => s.t / 60);
  const rssSlopeMibPerMin = slope(
    mins,
    half.map((s) => s.rssMib),
  );
  const handlesSlopePerMin = slope(
    mins,
    half.map((s) => s.handles),
  );
  const failures: string[] = [];
  if (rssSlopeMibPerMin > opts.maxRssMibPerMin) failures.push(`RSS grows ${rssSlopeMibPerMin.toFixed(2)} MiB/min (limit ${opts.maxRssMibPerMin})`);
  if (handlesSlopePerMin > opts.maxHandlesPerMin) failures.push(`handles grow ${handlesSlopePerMin.toFixed(2)}/min (limit ${opts.maxHandlesPerMin})`);
  return { rssSlopeMibPerMin, handlesSlopePerMin, failures };
}

export async function runSoak(opts: SoakOptions): Promise<SoakResult> {
  const log = opts.log ?? ((l: string) => console.log(l));
  let cluster: TestCluster | null = null;
  let brokers: FlowmqProcess[];
  if (opts.cluster) {
    cluster = await startCluster({ brokers: 3, haproxy: false, args: opts.brokerArgs ?? [] });
    brokers = cluster.brokers.map((b) => b.proc);
  } else brokers = [await FlowmqProcess.start({ args: opts.brokerArgs ?? [] })];
  // On a cluster every message crosses brokers: sender on one, receiver on the next.
  const at = (i: number): FlowmqProcess => brokers[i % brokers.length]!;
  const lanes: Lane[] = [];
  const samples: SoakSample[] = [];
  let acked = 0;
  let skipped = 0;
  let errors = 0;
  let latencies: number[] = [];
  try {
    lanes.push(await kafkaLane(at(0), at(1)), await mqttLane(at(0), at(1)), await amqpLane(at(1), at(2)), await natsLane(at(2), at(0)));
    log(
      `soak: ${lanes.length} protocols at ${opts.rate} msg/s each for ${opts.minutes} min on ${brokers.length === 1 ? 'one broker' : `${brokers.length} brokers (cluster)`}, a sample every ${opts.sampleSeconds} s`,
    );
    const inFlight = new Map<string, number>();
    let n = 0;
    const tick = (): void => {
      for (const lane of lanes) {
        const f = inFlight.get(lane.name) ?? 0;
        if (f >= MAX_IN_FLIGHT) {
          skipped++;
          continue;
        }
        inFlight.set(lane.name, f + 1);
        const t0 = performance.now();
        lane.send(n++).then(
          () => {
            acked++;
            latencies.push(performance.now() - t0);
          },
          () => errors++,
        );
      }
    };
    // Each send counts as in flight until it settles.
    for (const lane of lanes) {
      const send = lane.send.bind(lane);
      lane.send = (i) => {
        const p = send(i);
        void p.then(
          () => inFlight.set(lane.name, (inFlight.get(lane.name) ?? 1) - 1),
          () => inFlight.set(lane.name, (inFlight.get(lane.name) ?? 1) - 1),
        );
        return p;
      };
    }
    const start = Date.now();
    const end = start + opts.minutes * 60_000;
    const interval = 1000 / opts.rate;
    let nextTick = start;
    let nextSample = start + opts.sampleSeconds * 1000;
    let lastAcked = 0;
    let lastSampleAt = start;
    while (Date.now() < end) {
      const now = Date.now();
      while (nextTick <= now) {
        tick();
        nextTick += interval;
      }
      if (now >= nextSample) {
        const all = await Promise.all(brokers.map((b) => scrape(b)));
        const sum = (k: string): number => all.reduce((a, m) => a + (m.get(k) ?? 0), 0);
        const worst = (k: string): number => Math.max(...all.map((m) => m.get(k) ?? 0));
        const secs = (Date.now() - lastSampleAt) / 1000;
        const s: SoakSample = {
          t: Math.round((Date.now() - start) / 1000),
          throughput: Math.round((acked - lastAcked) / secs),
          p99Ms: Math.round(p99(latencies) * 10) / 10,
          rssMib: mib(sum('flowmq_process_resident_memory_bytes')),
          heapMib: mib(sum('flowmq_nodejs_heap_size_used_bytes')),
          externalMib: mib(sum('flowmq_nodejs_external_memory_bytes')),
          objectCacheMib: mib(sum('flowmq_object_cache_bytes')),
          lagP99Ms: Math.round(worst('flowmq_nodejs_eventloop_lag_p99_seconds') * 10000) / 10,
          handles: sum('flowmq_nodejs_active_handles_total'),
          fds: sum('flowmq_process_open_fds'),
          connections: sum('flowmq_listener_connections'),
        };
        samples.push(s);
        log(formatRow(s));
        lastAcked = acked;
        lastSampleAt = Date.now();
        latencies = [];
        nextSample += opts.sampleSeconds * 1000;
      }
      await sleep(Math.max(1, Math.min(nextTick, nextSample) - Date.now()));
    }
  } finally {
    for (const lane of lanes) await lane.close().catch(() => undefined);
    if (cluster) await cluster.close();
    else {
      await brokers[0]!.stop();
      brokers[0]!.cleanup();
    }
  }
  const g = growth(samples, opts);
  if (errors > 0) g.failures.push(`${errors} sends failed`);
  return { samples, acked, skipped, errors, ...g };
}

const mib = (bytes: number): number => Math.round((bytes / 1048576) * 10) / 10;

export const HEADER = '    t(s)  msg/s   p99(ms)  RSS(MiB)  heap(MiB)  external(MiB)  obj cache(MiB)  lag p99(ms)  handles   fds  conns';

export function formatRow(s: SoakSample): string {
  return [
    String(s.t).padStart(8),
    String(s.throughput).padStart(6),
    s.p99Ms.toFixed(1).padStart(9),
    s.rssMib.toFixed(1).padStart(9),
    s.heapMib.toFixed(1).padStart(10),
    s.externalMib.toFixed(1).padStart(14),
    s.objectCacheMib.toFixed(1).padStart(15),
    s.lagP99Ms.toFixed(1).padStart(12),
    String(s.handles).padStart(8),
    String(s.fds).padStart(5),
    String(s.connections).padStart(6),
  ].join(' ');
}
