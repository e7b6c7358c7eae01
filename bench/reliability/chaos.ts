/**
 * `npm run chaos -- --minutes M --seed S [--keep]` (bench/chaos.ts) and test/e2e/chaos.test.ts: faults
 * injected into a three-broker cluster under mixed traffic on the four protocols, then everything acknowledged
 * looked for.
 *
 * The cluster is test/helpers/cluster.ts's (PostgreSQL, s3rver, three `bin/flowmq start --cluster` brokers, a 2 s
 * lease), every broker behind fault-injecting proxies to PostgreSQL, S3 and its peers (chaos-nemesis.ts). Loads, each
 * client knowing every broker and moving to the next after a failure:
 * - Kafka: a KafkaJS idempotent producer, acks=all, into a 6-partition stream (chaos-loads.ts);
 * - MQTT: an MQTT.js QoS 1 publisher (persistent session), its topic captured by a stream (chaos-loads.ts);
 * - AMQP: an amqplib publisher with confirms, persistent messages into a durable queue (crash-loads.ts);
 * - JetStream: a `@nats-io/jetstream` publisher awaiting PubAcks, into a stream (crash-loads.ts);
 * - unless `subscriber` is false, a persistent MQTT 5.0 session subscribed at QoS 1 to the MQTT topic, reconnecting
 *   through every broker: each PUBACKed publish must reach it (a publish forwarded to the session's owner broker is
 *   acknowledged once that owner stored it, docs/cluster.md).
 * The nemesis injects one fault of each kind in turn (chaos-nemesis.ts), waits until the cluster has settled, then
 * a quiet gap, until the time is up. Then the loads drain and the checker reads everything back (chaos-check.ts).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from '../../test/e2e/harness.js';
import { startCluster } from '../../test/helpers/cluster.js';
import { freePort } from './crash.js';
import { AmqpConfirmLoad, JetStreamLoad } from './crash-loads.js';
import {
  CHAOS_KAFKA_PARTITIONS,
  CHAOS_KAFKA_TOPIC,
  CHAOS_MQTT_STREAM,
  KAFKA_KEYS,
  KafkaChaosLoad,
  MqttChaosPublisher,
  MqttChaosSubscriber,
} from './chaos-loads.js';
import { NetLab } from '../../test/helpers/netns.js';
import {
  ChaosCluster,
  defaultFaultKinds,
  describeFault,
  faultSchedule,
  NETNS_KINDS,
  type BrokerPorts,
  type FaultEvent,
  type FaultKind,
} from './chaos-nemesis.js';
import { checkKafka, countPayloads, faultTable, readStream, table, tallyLoad, type FaultRow, type LoadResult } from './chaos-check.js';

const AMQP_QUEUE = 'chaos.amqp';
const JS_STREAM = 'chaos.js';
const JS_SUBJECT = 'chaos.js.p';
const BROKERS = [1, 2, 3];
/** The broker that joins and leaves (join-leave). */
const SPARE = 4;

export interface ChaosOptions {
  /** Faults are injected until this many minutes have passed (the read-back comes after). */
  minutes: number;
  seed: number;
  /** At most this many faults (default: as many as fit). */
  maxFaults?: number;
  /** The fault kinds, injected in this order, in turn (default: every kind but pg-failover; with `pgHa`, all). */
  kinds?: FaultKind[];
  /** PostgreSQL made highly available by pg_auto_failover (test/helpers/pg-auto-failover.ts): needed by pg-failover. */
  pgHa?: boolean;
  /** Each broker in its own network namespace (test/helpers/netns.ts): needed by the net-* kinds. */
  netns?: boolean;
  /** Run the persistent MQTT subscriber; default true. */
  subscriber?: boolean;
  /** The quiet time after the cluster recovered from a fault, before the next: uniform in [min, max] ms (default 2-6 s). */
  gapMs?: [number, number];
  /** --cluster-lease, ms (default 2000). */
  leaseMs?: number;
  /** Keep every broker incarnation's log in a directory (printed). */
  keep?: boolean;
  log?: (line: string) => void;
}

export interface ChaosSummary {
  ok: boolean;
  seed: number;
  seconds: number;
  faults: FaultEvent[];
  loads: LoadResult[];
  byFault: FaultRow[];
  totals: { acked: number; lost: number; duplicates: number };
  /** What the faults' own checks found wrong (torn-write, bit-flip): each fails the run. */
  checkFailures: string[];
  kafkaBreaks: string[];
  /** Kafka records found more than once, with their partition/offset copies; lost ones with their key's partition. */
  kafkaDetail: string[];
  logDir: string | null;
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosSummary> {
  const log = opts.log ?? (() => undefined);
  const leaseMs = opts.leaseMs ?? 2000;
  const started = Date.now();
  const t = () => `[${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s]`;
  const logDir = opts.keep ? mkdtempSync(join(tmpdir(), 'flowmq-chaos-')) : null;
  if (logDir) process.env.FLOWMQ_CLUSTER_LOGS = logDir;
  const kinds = opts.kinds ?? defaultFaultKinds(opts);
  if (kinds.includes('pg-failover') && !opts.pgHa) throw new Error('pg-failover needs a highly available PostgreSQL (--pg-ha)');
  const netKind = kinds.find((k) => NETNS_KINDS.includes(k));
  if (netKind && !opts.netns) throw new Error(`${netKind} needs each broker in its own network namespace (--netns)`);
  if (opts.netns && kinds.includes('peer-partition'))
    throw new Error('peer-partition is a proxy in front of each cluster port, which --netns replaces by the links (net-peers)');
  const c = await startCluster({ brokers: 0, haproxy: false, leaseMs, pgHa: opts.pgHa });
  let net: NetLab | null = null;
  try {
    net = opts.netns ? NetLab.create({ ids: [...BROKERS, SPARE] }) : null;
  } catch (err) {
    await c.close();
    throw err;
  }
  const ports = new Map<number, BrokerPorts>();
  for (const id of [...BROKERS, SPARE]) {
    // In namespaces, every broker has its own address: the same ports do.
    ports.set(id, {
      http: await freePort(),
      kafka: await freePort(),
      mqtt: await freePort(),
      amqp: await freePort(),
      nats: await freePort(),
      cluster: await freePort(),
    });
  }
  const chaos = new ChaosCluster(c, ports, log, net, SPARE);
  const saveLog = (id: number) => {
    if (!logDir) return;
    mkdirSync(logDir, { recursive: true });
    const b = c.broker(id);
    writeFileSync(join(logDir, `broker-${id}-${b.pid}.log`), `${c.logs(id)}\n${b.proc.errorOutput}`);
  };
  chaos.beforeRestart = saveLog;
  const stops: Array<() => Promise<unknown>> = [];
  try {
    for (const id of [...BROKERS, SPARE]) await chaos.addProxies(id);
    c.backendsFor = (id) => chaos.backends(id);
    // The first broker alone (it creates the schema), then the others.
    await chaos.startBroker(1);
    await Promise.all(BROKERS.slice(1).map((id) => chaos.startBroker(id)));
    // On a loaded machine a broker can lose its first lease while it starts: recover() restarts what died.
    if (!(await chaos.recover(120_000))) throw new Error('the three brokers did not come up');
    const admin = c.broker(1).proc;
    await admin.api('POST', '/api/v1/streams', { name: CHAOS_KAFKA_TOPIC, partitions: CHAOS_KAFKA_PARTITIONS });
    await admin.api('POST', '/api/v1/streams', { name: CHAOS_MQTT_STREAM, partitions: 2, bindings: ['chaos/mqtt/#'] });
    await admin.api('POST', '/api/v1/streams', { name: JS_STREAM, partitions: 1, bindings: ['chaos/js/#'] });
    await c.waitCatalog({ streams: [CHAOS_KAFKA_TOPIC, CHAOS_MQTT_STREAM, JS_STREAM] });
    await c.waitSettled({ min: { partition: CHAOS_KAFKA_PARTITIONS + 3 }, timeoutMs: 60_000 });

    // Fault windows: window i starts when fault i is injected (0: before the first).
    const windows: Array<{ kind: FaultKind | 'none' }> = [{ kind: 'none' }];
    let current = 0;
    const sent = { kafka: new Map<number, number>(), mqtt: new Map<number, number>(), amqp: new Map<number, number>(), js: new Map<number, number>() };
    const at = (m: Map<number, number>) => (n: number) => void m.set(n, current);
    // Each client starts at another broker.
    const list = <T>(xs: T[], first: number) => [...xs.slice(first), ...xs.slice(0, first)];
    const p = BROKERS.map((id) => ({ ...ports.get(id)!, host: chaos.host(id) }));
    const bootstrap = p.map((x) => `${x.host}:${x.kafka}`);
    const sub = (opts.subscriber ?? true) ? await MqttChaosSubscriber.start(list(p, 2).map((x) => `${x.host}:${x.mqtt}`)) : null;
    if (sub) stops.push(() => sub.close());
    const kafka = new KafkaChaosLoad(bootstrap, at(sent.kafka));
    stops.push(() => kafka.drain());
    const mqttPub = new MqttChaosPublisher(
      list(p, 1).map((x) => `${x.host}:${x.mqtt}`),
      at(sent.mqtt),
    );
    stops.push(() => mqttPub.close());
    const amqp = new AmqpConfirmLoad(
      list(p, 2).map((x) => `amqp://guest:guest@${x.host}:${x.amqp}`),
      20,
      { name: AMQP_QUEUE, onSend: at(sent.amqp) },
    );
    stops.push(() => amqp.drain(1000));
    const js = new JetStreamLoad(
      list(p, 0).map((x) => `${x.host}:${x.nats}`),
      10,
      { name: JS_SUBJECT, onSend: at(sent.js) },
    );
    stops.push(() => js.drain(1000));
    const progress = () =>
      `acked kafka ${kafka.acked.size}, mqtt ${mqttPub.acked.size} (${mqttPub.client.connected ? 'connected' : 'not connected'}, ${mqttPub.pending} in flight), amqp ${amqp.acked.size}, jetstream ${js.acked.size}` +
      (sub ? `; subscriber got ${sub.received.size}` : '');

    log(`${t()} chaos: seed ${opts.seed}, ${opts.minutes} min, lease ${leaseMs} ms, faults ${kinds.join(', ')}; loads running`);
    await sleep(3000);
    const next = faultSchedule(opts.seed, leaseMs, BROKERS, opts.gapMs, kinds);
    const faults: FaultEvent[] = [];
    const end = started + opts.minutes * 60_000;
    while (Date.now() < end && faults.length < (opts.maxFaults ?? Infinity)) {
      const spec = next();
      const ev: FaultEvent = { ...spec, index: faults.length + 1, at: Date.now() - started, recoveredMs: -1, note: '' };
      windows.push({ kind: spec.kind });
      current = windows.length - 1;
      log(`${t()} fault ${ev.index}: ${describeFault(spec)}`);
      const injected = Date.now();
      try {
        ev.note = await chaos.inject(spec);
      } catch (err) {
        ev.note = `failed: ${(err as Error).message.slice(0, 300)}`;
      }
      if (await chaos.recover(90_000)) ev.recoveredMs = Date.now() - injected;
      try {
        const checked = await chaos.afterRecovery();
        if (checked) ev.note = ev.note ? `${ev.note}; ${checked}` : checked;
      } catch (err) {
        chaos.checkFailures.push(`fault ${ev.index} (${ev.kind}): its check threw ${(err as Error).message.slice(0, 300)}`);
      }
      faults.push(ev);
      log(
        `${t()} fault ${ev.index}: ${ev.recoveredMs >= 0 ? `settled ${(ev.recoveredMs / 1000).toFixed(1)} s after injection` : 'NOT settled'}${ev.note ? ` (${ev.note})` : ''}; ${progress()}`,
      );
      await sleep(spec.gapMs);
    }
    log(`${t()} chaos: ${faults.length} faults; draining the loads`);
    await kafka.drain();
    await amqp.drain(30_000);
    await js.drain(30_000);
    const stuck = await mqttPub.drain(30_000);
    if (stuck > 0) log(`${t()} ${stuck} MQTT publishes still unacknowledged after 30 s (not counted)`);
    log(`${t()} ${progress()}; reading back`);

    const krecs = await readStream(bootstrap, CHAOS_KAFKA_TOPIC);
    const k = checkKafka(krecs);
    const mqttCounts = countPayloads(await readStream(bootstrap, CHAOS_MQTT_STREAM), 'q1');
    const jsCounts = countPayloads(await readStream(bootstrap, JS_STREAM), 'js');
    const amqpCounts = await amqp.readBack(120_000);
    const loads: LoadResult[] = [
      tallyLoad(
        { name: 'kafka idempotent acks=all', promise: 'exactly-once', failures: kafka.failures, orderBreaks: k.orderBreaks },
        kafka.acked,
        k.counts,
        sent.kafka,
      ),
      tallyLoad({ name: 'mqtt QoS 1 -> stream', promise: 'at-least-once', failures: mqttPub.failures }, mqttPub.acked, mqttCounts, sent.mqtt),
      tallyLoad({ name: `amqp confirms -> ${AMQP_QUEUE}`, promise: 'at-least-once', failures: amqp.failures }, amqp.acked, amqpCounts, sent.amqp),
      tallyLoad({ name: 'jetstream pubacks -> stream', promise: 'at-least-once', failures: js.failures }, js.acked, jsCounts, sent.js),
    ];
    if (sub) {
      // What the subscriber gets can only be waited for: up to 30 s for everything acknowledged.
      const deadline = Date.now() + 30_000;
      while ([...mqttPub.acked].some((n) => !sub.received.has(n)) && Date.now() < deadline) await sleep(200);
      loads.push(tallyLoad({ name: 'mqtt QoS 1 -> persistent subscriber', promise: 'at-least-once', failures: 0 }, mqttPub.acked, sub.received, sent.mqtt));
    }
    const totals = {
      acked: loads.reduce((s, l) => s + l.acked, 0),
      lost: loads.reduce((s, l) => s + l.lost, 0),
      duplicates: loads.reduce((s, l) => s + l.duplicates, 0),
    };
    const kafkaRow = loads[0]!;
    const ok =
      totals.lost === 0 && kafkaRow.duplicates === 0 && kafkaRow.orderBreaks === 0 && loads.every((l) => l.acked > 0) && chaos.checkFailures.length === 0;
    return {
      ok,
      seed: opts.seed,
      seconds: (Date.now() - started) / 1000,
      faults,
      loads,
      byFault: faultTable(kinds, windows, loads),
      totals,
      checkFailures: [...chaos.checkFailures],
      kafkaBreaks: k.breaks.slice(0, 20),
      kafkaDetail: kafkaDetail(k.where, kafka.acked, loads[0]!.lostSample),
      logDir,
    };
  } finally {
    for (const s of stops) await s().catch(() => undefined);
    for (const b of c.brokers) if (b.state !== 'dead') saveLog(b.id);
    await chaos.close();
  }
}

/** Kafka duplicates (every copy's partition/offset) and lost records (their neighbours in the same key). */
function kafkaDetail(where: Map<number, string[]>, acked: Set<number>, lost: number[]): string[] {
  const out: string[] = [];
  for (const [n, w] of where) if (w.length > 1 && out.length < 20) out.push(`record ${n}${acked.has(n) ? '' : ' (not acknowledged)'} found at ${w.join(', ')}`);
  for (const n of lost) {
    const before = [...where.keys()].filter((m) => m < n && m % KAFKA_KEYS === n % KAFKA_KEYS).sort((a, b) => b - a)[0];
    const after = [...where.keys()].filter((m) => m > n && m % KAFKA_KEYS === n % KAFKA_KEYS).sort((a, b) => a - b)[0];
    out.push(
      `record ${n} lost; same key before: ${before ?? '-'} at ${before === undefined ? '-' : where.get(before)!.join(',')}, after: ${after ?? '-'} at ${after === undefined ? '-' : where.get(after)!.join(',')}`,
    );
  }
  return out;
}

/** A load's lost messages per kind of the fault window they were sent in: `kill 12, pause 3`. */
function lostByKind(s: ChaosSummary, l: LoadResult): string {
  const by = new Map<string, number>();
  for (const [i, x] of l.byWindow) {
    if (x.lost === 0) continue;
    const kind = i === 0 ? 'none' : (s.faults[i - 1]?.kind ?? '?');
    by.set(kind, (by.get(kind) ?? 0) + x.lost);
  }
  return [...by].map(([k, n]) => `${k} ${n}`).join(', ');
}

export function formatChaosSummary(s: ChaosSummary): string {
  const lines: string[] = [];
  lines.push(`chaos: seed ${s.seed}, ${s.faults.length} faults in ${s.seconds.toFixed(1)} s: ${s.ok ? 'OK' : 'FAILED'}`);
  lines.push('');
  lines.push(
    table(
      ['fault kind', 'injected', 'acknowledged', 'lost', 'duplicated'],
      s.byFault.map((r) => [r.kind === 'none' ? 'none (before the first fault)' : r.kind, r.kind === 'none' ? '-' : r.injected, r.acked, r.lost, r.duplicates]),
    ),
  );
  lines.push('');
  lines.push(
    table(
      ['load', 'acknowledged', 'found', 'lost', 'duplicated', 'failed sends', 'notes'],
      s.loads.map((l) => [
        l.name,
        l.acked,
        l.found,
        l.lost,
        l.duplicates,
        l.failures,
        [
          l.promise === 'exactly-once' ? `exactly once, order breaks ${l.orderBreaks}` : 'at least once',
          l.lost > 0 ? `lost e.g. ${l.lostSample.slice(0, 10).join(',')}; by fault window: ${lostByKind(s, l)}` : '',
        ]
          .filter(Boolean)
          .join('; '),
      ]),
    ),
  );
  if (s.kafkaBreaks.length > 0) lines.push(`kafka order breaks: ${s.kafkaBreaks.join('; ')}`);
  for (const d of s.kafkaDetail) lines.push(`kafka: ${d}`);
  const unsettled = s.faults.filter((f) => f.recoveredMs < 0 || f.note);
  for (const f of unsettled) lines.push(`fault ${f.index} (${f.kind}): ${f.recoveredMs < 0 ? 'cluster did not settle within 90 s' : ''} ${f.note}`.trim());
  for (const x of s.checkFailures) lines.push(`check failed: ${x}`);
  if (s.logDir) lines.push(`broker logs kept: ${s.logDir}`);
  lines.push(`chaos: ${s.totals.acked} acknowledged, ${s.totals.lost} lost, ${s.totals.duplicates} duplicated`);
  return lines.join('\n');
}
