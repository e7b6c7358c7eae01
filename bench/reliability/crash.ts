/**
 * kill -9 cycles under load, behind `npm run crash-test` and test/e2e/crash.test.ts.
 *
 * A real bin/flowmq (embedded storage, WAL fsync on, small segments so that sealing and WAL trimming happen
 * between kills) is SIGKILLed at random moments and restarted on the same data directory and the same ports,
 * while these clients keep working through every restart:
 * - an idempotent KafkaJS producer (acks=all, one request in flight) sending batches to a 3-partition stream;
 * - an MQTT.js 3.1.1 QoS 1 publisher and an MQTT.js 5.0 QoS 2 publisher (persistent sessions, reconnecting)
 *   publishing to topics captured by a stream bound to `crash/mqtt/#`;
 * - an MQTT.js 5.0 subscriber with a persistent session subscribed to `crash/mqtt/#` at QoS 2;
 * - an amqplib publisher with confirms sending persistent messages into a durable queue, and a JetStream
 *   publisher (PubAcks) into a stream (bench/reliability/crash-loads.ts).
 * Every acknowledgement (produce response, PUBACK, PUBCOMP) is recorded. After the last cycle the broker runs
 * once more, the clients drain, and every acknowledged message is looked for: Kafka records and MQTT messages
 * read back from the streams with kcat; MQTT messages in what the persistent subscriber received; AMQP messages
 * consumed from the queue up to a marker; JetStream messages read back from their stream with kcat.
 * Failures: an acknowledged message missing anywhere, a duplicate from the idempotent producer, a Kafka
 * partition out of order. Duplicates of MQTT messages are counted and reported: QoS 1 allows them, and QoS 2
 * across a kill -9 can still produce them (`exactlyOnce` below): the message is made durable and the session
 * that remembers its packet id is stored after it, in two writes, so a broker killed between the two takes the
 * client's re-sent PUBLISH for a new message. The opposite order lost messages (see MqttSession.relNotDurable).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import kafkajs from 'kafkajs';
import mqtt, { type MqttClient } from 'mqtt';
import { FLOWMQ_BIN, kcatConsume, sleep } from '../../test/e2e/harness.js';
import { freePort } from '../../test/helpers/ports.js';
import { prng } from '../../test/helpers/prng.js';
import { AMQP_QUEUE, AmqpConfirmLoad, JetStreamLoad, JS_STREAM } from './crash-loads.js';

const { Kafka, logLevel } = kafkajs;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

export interface CrashOptions {
  cycles: number;
  seed?: number;
  /** How long the broker runs under load before a kill: uniform in [min, max] ms. */
  upMs?: [number, number];
  /** Share of cycles in which the broker is killed while it starts (recovery), before it listens. */
  startupKillShare?: number;
  /** Keep the data directory (printed) instead of removing it. */
  keep?: boolean;
  log?: (line: string) => void;
}

export interface Tally {
  /** Messages acknowledged to the client. */
  acked: number;
  /** Acknowledged messages found. */
  found: number;
  /** Acknowledged messages not found: must be 0. */
  lost: number;
  /** Messages found more than once (counted once per extra copy). */
  duplicates: number;
  /** Sample of lost message numbers. */
  lostSample: number[];
}

export interface CrashSummary {
  cycles: number;
  startupKills: number;
  seconds: number;
  kafka: Tally & { orderViolations: number; sendFailures: number };
  /** MQTT messages as captured by the stream, per QoS. */
  mqttStreamQos1: Tally;
  mqttStreamQos2: Tally;
  /** MQTT messages as received by the persistent subscriber, per QoS of the publish. */
  subscriberQos1: Tally;
  subscriberQos2: Tally;
  /** AMQP persistent messages confirmed, as consumed from the durable queue afterwards. */
  amqpQueue: Tally & { failures: number };
  /** JetStream publishes with a PubAck, as read back from the stream. */
  jetstream: Tally & { failures: number };
  /** Whether nothing acknowledged was lost, the idempotent producer wrote each record once, and in order. */
  ok: boolean;
  /** Whether no QoS 2 message was duplicated, in the stream or at the subscriber. */
  exactlyOnce: boolean;
  dataDir: string;
}

const KAFKA_TOPIC = 'crash.kafka';
const MQTT_STREAM = 'crash.mqtt';

export { freePort };

export interface Ports {
  mqtt: number;
  kafka: number;
  amqp: number;
  nats: number;
  http: number;
}

export class Broker {
  readonly proc: ChildProcess;
  readonly exited: Promise<void>;
  stderr = '';
  constructor(dataDir: string, ports: Ports, logFile: NodeJS.WritableStream) {
    const args = [
      'start',
      '--data-dir',
      dataDir,
      '--host',
      '127.0.0.1',
      '--mqtt-port',
      String(ports.mqtt),
      '--kafka-port',
      String(ports.kafka),
      '--http-port',
      String(ports.http),
      '--amqp-port',
      String(ports.amqp),
      '--nats-port',
      String(ports.nats),
      '--mqtt-ws-port',
      '0',
      '--wal-fsync',
      'true',
      '--log-level',
      'warn',
      // Segments seal and the WAL is trimmed between kills, not only at the end.
      '--segment-bytes',
      '256KiB',
      '--segment-ms',
      '3s',
      // The subscriber may be offline for a while: keep its queue whole.
      '--mqtt-max-queued-messages',
      '1000000',
    ];
    this.proc = spawn(FLOWMQ_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FLOWMQ_NODE: process.execPath } });
    this.proc.stdout!.pipe(logFile, { end: false });
    this.proc.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
      logFile.write(d);
    });
    this.exited = new Promise((r) => this.proc.once('exit', () => r()));
  }

  isRunning(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async ready(http: number, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (!this.isRunning()) throw new Error(`flowmq exited while starting (${this.proc.exitCode ?? this.proc.signalCode}): ${this.stderr.slice(-4000)}`);
      try {
        const res = await fetch(`http://127.0.0.1:${http}/healthz`);
        if (res.ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`flowmq did not start within ${timeoutMs} ms: ${this.stderr.slice(-4000)}`);
      await sleep(25);
    }
  }

  async kill(): Promise<void> {
    if (this.isRunning()) this.proc.kill('SIGKILL');
    await this.exited;
  }
}

export async function api(http: number, method: string, path: string, body?: unknown): Promise<void> {
  const res = await fetch(`http://127.0.0.1:${http}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok && res.status !== 409) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
}

function tally(acked: Set<number>, counts: Map<number, number>): Tally {
  const t: Tally = { acked: acked.size, found: 0, lost: 0, duplicates: 0, lostSample: [] };
  for (const n of acked) {
    if ((counts.get(n) ?? 0) > 0) t.found++;
    else {
      t.lost++;
      if (t.lostSample.length < 20) t.lostSample.push(n);
    }
  }
  for (const c of counts.values()) if (c > 1) t.duplicates += c - 1;
  return t;
}

const count = (m: Map<number, number>, n: number): void => {
  m.set(n, (m.get(n) ?? 0) + 1);
};

/** An MQTT publisher that keeps `window` publishes in flight and records what was acknowledged. */
class MqttPublisher {
  readonly acked = new Set<number>();
  private next = 0;
  private inflight = new Set<Promise<void>>();
  private running = true;
  private loop: Promise<void>;
  constructor(
    readonly client: MqttClient,
    readonly name: string,
    readonly qos: 1 | 2,
    readonly window: number,
  ) {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (this.running) {
      if (this.inflight.size >= this.window || !this.client.connected) {
        await Promise.race([...this.inflight, sleep(20)]);
        continue;
      }
      const n = this.next++;
      const p = this.client
        .publishAsync(`crash/mqtt/${this.name}`, `${this.name}:${n}`, { qos: this.qos })
        .then(
          () => void this.acked.add(n),
          () => undefined,
        )
        .finally(() => this.inflight.delete(p));
      this.inflight.add(p);
    }
  }

  /** Stops publishing and waits (up to `timeoutMs`) for what is in flight to be acknowledged. */
  async drain(timeoutMs: number): Promise<number> {
    this.running = false;
    await this.loop;
    const deadline = Date.now() + timeoutMs;
    while (this.inflight.size > 0 && Date.now() < deadline) await sleep(50);
    return this.inflight.size;
  }

  get sent(): number {
    return this.next;
  }
}

/** The idempotent Kafka producer's loop: batches of 25, one request at a time, each acknowledgement recorded. */
class KafkaLoad {
  readonly acked = new Set<number>();
  sendFailures = 0;
  private next = 0;
  private running = true;
  private loop: Promise<void>;
  private producer: kafkajs.Producer | null = null;
  constructor(private readonly kafka: kafkajs.Kafka) {
    this.loop = this.run();
  }

  private newProducer(): kafkajs.Producer {
    return this.kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      // Retries span a restart: a send that fails for good is simply not acknowledged.
      retry: { retries: 40, initialRetryTime: 100, maxRetryTime: 1000 },
    });
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        if (!this.producer) {
          this.producer = this.newProducer();
          await this.producer.connect();
        }
        const ns = Array.from({ length: 25 }, () => this.next++);
        await this.producer.send({
          topic: KAFKA_TOPIC,
          acks: -1,
          messages: ns.map((n) => ({ key: `k${n % 13}`, value: `k:${n}` })),
        });
        for (const n of ns) this.acked.add(n);
      } catch {
        // Not acknowledged. A producer whose send failed may hold a sequence number the broker already used:
        // start over with a new producer id rather than reuse it (KIP-98 leaves that to the application).
        this.sendFailures++;
        const p = this.producer;
        this.producer = null;
        await p?.disconnect().catch(() => undefined);
        await sleep(100);
      }
    }
  }

  async drain(): Promise<void> {
    this.running = false;
    await this.loop;
    await this.producer?.disconnect().catch(() => undefined);
  }
}

export async function runCrashTest(opts: CrashOptions): Promise<CrashSummary> {
  const log = opts.log ?? (() => undefined);
  const rnd = prng(opts.seed ?? 1);
  const [upMin, upMax] = opts.upMs ?? [200, 2000];
  const startupKillShare = opts.startupKillShare ?? 0.1;
  const started = Date.now();
  const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-crash-'));
  // The broker's log (all runs appended), beside the data directory and kept with it.
  const logPath = `${dataDir}.broker.log`;
  const logFile = createWriteStream(logPath);
  const ports: Ports = { mqtt: await freePort(), kafka: await freePort(), amqp: await freePort(), nats: await freePort(), http: await freePort() };
  let broker = new Broker(dataDir, ports, logFile);
  await broker.ready(ports.http);
  await api(ports.http, 'POST', '/api/v1/streams', { name: KAFKA_TOPIC, partitions: 3 });
  await api(ports.http, 'POST', '/api/v1/streams', { name: MQTT_STREAM, partitions: 2, bindings: ['crash/mqtt/#'] });
  await api(ports.http, 'POST', '/api/v1/streams', { name: JS_STREAM, partitions: 1, bindings: ['crash/js/#'] });

  const url = `mqtt://127.0.0.1:${ports.mqtt}`;
  const common = { reconnectPeriod: 200, connectTimeout: 3000, keepalive: 10, clean: false } as const;
  // The subscriber's session (and subscription) exists before anything is published.
  const received = { q1: new Map<number, number>(), q2: new Map<number, number>() };
  const sub = mqtt.connect(url, { ...common, protocolVersion: 5, clientId: 'crash-sub', properties: { sessionExpiryInterval: 86_400 } });
  sub.on('error', () => undefined);
  sub.on('message', (_topic, payload) => {
    const [who, n] = payload.toString().split(':');
    if (who === 'q1') count(received.q1, Number(n));
    else if (who === 'q2') count(received.q2, Number(n));
  });
  await new Promise<void>((resolve, reject) => {
    sub.once('connect', () => resolve());
    sub.once('error', reject);
  });
  await sub.subscribeAsync('crash/mqtt/#', { qos: 2 });

  const q1Client = mqtt.connect(url, { ...common, protocolVersion: 4, clientId: 'crash-pub-q1' });
  const q2Client = mqtt.connect(url, { ...common, protocolVersion: 5, clientId: 'crash-pub-q2', properties: { sessionExpiryInterval: 86_400 } });
  for (const c of [q1Client, q2Client]) c.on('error', () => undefined);
  const q1 = new MqttPublisher(q1Client, 'q1', 1, 10);
  const q2 = new MqttPublisher(q2Client, 'q2', 2, 10);
  const kafka = new Kafka({
    clientId: 'crash-test',
    brokers: [`127.0.0.1:${ports.kafka}`],
    logLevel: logLevel.NOTHING,
    connectionTimeout: 2000,
    requestTimeout: 10_000,
    retry: { retries: 40, initialRetryTime: 100, maxRetryTime: 1000 },
  });
  const kload = new KafkaLoad(kafka);
  const amqpUrl = `amqp://guest:guest@127.0.0.1:${ports.amqp}`;
  const aload = new AmqpConfirmLoad(amqpUrl);
  const jsload = new JetStreamLoad(ports.nats);

  let startupKills = 0;
  try {
    for (let cycle = 1; cycle <= opts.cycles; cycle++) {
      if (cycle > 1) {
        broker = new Broker(dataDir, ports, logFile);
        if (rnd() < startupKillShare) {
          // Killed while it recovers, before (or just as) it listens.
          await sleep(Math.floor(rnd() * 400));
          await broker.kill();
          startupKills++;
          broker = new Broker(dataDir, ports, logFile);
        }
        await broker.ready(ports.http);
      }
      const up = upMin + Math.floor(rnd() * (upMax - upMin));
      await sleep(up);
      await broker.kill();
      log(
        `cycle ${cycle}/${opts.cycles}: killed after ${up} ms; acked kafka ${kload.acked.size}, mqtt q1 ${q1.acked.size}, q2 ${q2.acked.size}, amqp ${aload.acked.size}, jetstream ${jsload.acked.size}; received ${received.q1.size + received.q2.size}`,
      );
    }
    // The last run: everything in flight settles, then the streams are read back.
    broker = new Broker(dataDir, ports, logFile);
    await broker.ready(ports.http);
    await kload.drain();
    await aload.drain(30_000);
    await jsload.drain(30_000);
    const stuck = (await q1.drain(30_000)) + (await q2.drain(30_000));
    if (stuck > 0) log(`${stuck} MQTT publishes still unacknowledged after 30 s (not counted)`);
    // The subscriber gets everything acknowledged (or the time runs out and what is missing is reported).
    const deadline = Date.now() + 60_000;
    const all = (): boolean => [...q1.acked].every((n) => received.q1.has(n)) && [...q2.acked].every((n) => received.q2.has(n));
    while (!all() && Date.now() < deadline) await sleep(100);

    const kafkaCounts = new Map<number, number>();
    let orderViolations = 0;
    const lastByPartition = new Map<number, number>();
    const krecords = await kcatConsume(`127.0.0.1:${ports.kafka}`, KAFKA_TOPIC);
    krecords.sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    for (const r of krecords) {
      const n = Number(String(r.payload).split(':')[1]);
      const seen = kafkaCounts.has(n);
      count(kafkaCounts, n);
      if (seen) continue;
      const last = lastByPartition.get(r.partition) ?? -1;
      if (n <= last) orderViolations++;
      lastByPartition.set(r.partition, n);
    }
    const streamQ1 = new Map<number, number>();
    const streamQ2 = new Map<number, number>();
    for (const r of await kcatConsume(`127.0.0.1:${ports.kafka}`, MQTT_STREAM)) {
      const [who, n] = String(r.payload).split(':');
      count(who === 'q1' ? streamQ1 : streamQ2, Number(n));
    }
    const amqpCounts = await aload.readBack(60_000);
    const jsCounts = new Map<number, number>();
    for (const r of await kcatConsume(`127.0.0.1:${ports.kafka}`, JS_STREAM)) count(jsCounts, Number(String(r.payload).split(':')[1]));
    const summary: CrashSummary = {
      cycles: opts.cycles,
      startupKills,
      seconds: Math.round((Date.now() - started) / 100) / 10,
      kafka: { ...tally(kload.acked, kafkaCounts), orderViolations, sendFailures: kload.sendFailures },
      mqttStreamQos1: tally(q1.acked, streamQ1),
      mqttStreamQos2: tally(q2.acked, streamQ2),
      subscriberQos1: tally(q1.acked, received.q1),
      subscriberQos2: tally(q2.acked, received.q2),
      amqpQueue: { ...tally(aload.acked, amqpCounts), failures: aload.failures },
      jetstream: { ...tally(jsload.acked, jsCounts), failures: jsload.failures },
      ok: false,
      exactlyOnce: false,
      dataDir,
    };
    summary.ok =
      summary.kafka.lost === 0 &&
      summary.kafka.duplicates === 0 &&
      orderViolations === 0 &&
      summary.mqttStreamQos1.lost === 0 &&
      summary.mqttStreamQos2.lost === 0 &&
      summary.subscriberQos1.lost === 0 &&
      summary.subscriberQos2.lost === 0 &&
      summary.amqpQueue.lost === 0 &&
      summary.jetstream.lost === 0 &&
      summary.amqpQueue.acked > 0 &&
      summary.jetstream.acked > 0 &&
      summary.kafka.acked > 0 &&
      summary.mqttStreamQos1.acked > 0 &&
      summary.mqttStreamQos2.acked > 0;
    summary.exactlyOnce = summary.mqttStreamQos2.duplicates === 0 && summary.subscriberQos2.duplicates === 0;
    return summary;
  } finally {
    await Promise.all([q1Client, q2Client, sub].map((c) => c.endAsync(true).catch(() => undefined)));
    await kload.drain().catch(() => undefined);
    await aload.drain(1000).catch(() => undefined);
    await jsload.drain(1000).catch(() => undefined);
    await broker.kill();
    logFile.end();
    if (!opts.keep) {
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(logPath, { force: true });
    }
  }
}

export function formatSummary(s: CrashSummary): string {
  const row = (name: string, t: Tally, extra = ''): string =>
    `${name.padEnd(28)} acked ${String(t.acked).padStart(7)}  found ${String(t.found).padStart(7)}  lost ${String(t.lost).padStart(4)}  duplicates ${String(t.duplicates).padStart(5)}${extra}` +
    (t.lost > 0 ? `\n${''.padEnd(28)} lost e.g. ${t.lostSample.join(', ')}` : '');
  return [
    `crash test: ${s.cycles} kill -9 cycles (${s.startupKills} more during start-up) in ${s.seconds} s: ${s.ok ? 'OK' : 'FAILED'}` +
      `${s.exactlyOnce ? '' : ' (QoS 2 duplicates after kill -9)'}`,
    row('kafka idempotent acks=all', s.kafka, `  out of order ${s.kafka.orderViolations}  failed sends ${s.kafka.sendFailures}`),
    row('mqtt QoS 1 -> stream', s.mqttStreamQos1),
    row('mqtt QoS 2 -> stream', s.mqttStreamQos2),
    row('mqtt QoS 1 -> subscriber', s.subscriberQos1),
    row('mqtt QoS 2 -> subscriber', s.subscriberQos2),
    row(`amqp confirms -> ${AMQP_QUEUE}`, s.amqpQueue, `  failed publishes ${s.amqpQueue.failures}`),
    row('jetstream pubacks -> stream', s.jetstream, `  failed publishes ${s.jetstream.failures}`),
  ].join('\n');
}
