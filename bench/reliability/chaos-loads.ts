/**
 * The Kafka and MQTT loads of the chaos runner (bench/reliability/chaos.ts); the AMQP and JetStream ones are
 * crash-loads.ts's, given every broker. Each client knows all three brokers and moves to another after a failure.
 * - KafkaChaosLoad: a KafkaJS idempotent producer (acks=all, one request in flight per broker) sending batches of
 *   keyed records to a multi-partition stream, its bootstrap list every broker; a batch counts as acknowledged when
 *   its produce response arrives. After a failed send it starts over with a new producer (a new producer id): the
 *   failed batch is never sent again, so every record appears at most once if idempotence holds. Each send() holds
 *   the records of one partition only (key k<j> always to partition j % 6): KafkaJS 2.2.4 keeps a multi-partition
 *   send's responses per broker (producer/sendMessages.js), so when a partition's leader moves during a send to a
 *   broker that already answered for other partitions, the retry skips that partition (its records are never
 *   written, yet send() resolves: lost) or sends it again with the next sequence numbers (duplicated); the first
 *   chaos runs showed both (kafkajs issue 1303, pull request 1798).
 * - MqttChaosPublisher: MQTT.js 3.1.1, QoS 1, persistent session, `servers` = every broker (MQTT.js moves to the
 *   next on each reconnect), `window` publishes in flight; acknowledged = PUBACK. A stream captures the topic.
 * - MqttChaosSubscriber: MQTT.js 5.0, a persistent session subscribed at QoS 1 to the publishers' topic, reconnecting
 *   through every broker: what reached it (every PUBACKed publish must).
 */
import kafkajs from 'kafkajs';
import mqtt, { type MqttClient } from 'mqtt';
import { sleep } from '../../test/e2e/harness.js';

const { Kafka, logLevel } = kafkajs;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

export const CHAOS_KAFKA_TOPIC = 'chaos.kafka';
export const CHAOS_KAFKA_PARTITIONS = 6;
export const CHAOS_MQTT_STREAM = 'chaos.mqtt';
export const CHAOS_MQTT_TOPIC = 'chaos/mqtt/q1';
/** Distinct keys of the Kafka records (`k<n % KEYS>`): per-key order is checked too. */
export const KAFKA_KEYS = 13;

export interface ChaosLoad {
  readonly acked: Set<number>;
  /** Sends or publishes that failed (not acknowledged, not counted). */
  failures: number;
}

/** The partition of record `n`: its key's (`k<n % KAFKA_KEYS>`) index modulo the partition count. */
export const partitionOf = (n: number): number => (n % KAFKA_KEYS) % CHAOS_KAFKA_PARTITIONS;

/** The idempotent producer's loop: batches of `batch`, acks=all, each acknowledgement recorded. */
export class KafkaChaosLoad implements ChaosLoad {
  readonly acked = new Set<number>();
  failures = 0;
  private next = 0;
  private running = true;
  private readonly loop: Promise<void>;
  private producer: kafkajs.Producer | null = null;
  private readonly kafka: kafkajs.Kafka;

  constructor(
    bootstrap: string[],
    private readonly onSend: (n: number) => void,
    private readonly batch = 20,
    private readonly paceMs = 0,
  ) {
    this.kafka = new Kafka({
      clientId: 'chaos-producer',
      brokers: bootstrap,
      logLevel: logLevel.NOTHING,
      connectionTimeout: 2000,
      requestTimeout: 10_000,
      retry: { retries: 40, initialRetryTime: 100, maxRetryTime: 1000 },
    });
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        if (!this.producer) {
          this.producer = this.kafka.producer({
            idempotent: true,
            maxInFlightRequests: 1,
            retry: { retries: 40, initialRetryTime: 100, maxRetryTime: 1000 },
          });
          await this.producer.connect();
        }
        const ns = Array.from({ length: this.batch }, () => this.next++);
        for (const n of ns) this.onSend(n);
        // One send per partition (KafkaJS 2.2.4 loses or duplicates records of a send spanning several leaders
        // when one of them moves: see the class comment), the partitions' sends in parallel.
        const byPartition = new Map<number, number[]>();
        for (const n of ns) byPartition.set(partitionOf(n), [...(byPartition.get(partitionOf(n)) ?? []), n]);
        const producer = this.producer;
        const results = await Promise.allSettled(
          [...byPartition].map(async ([partition, group]) => {
            await producer.send({
              topic: CHAOS_KAFKA_TOPIC,
              acks: -1,
              messages: group.map((n) => ({ key: `k${n % KAFKA_KEYS}`, value: `k:${n}`, partition })),
            });
            for (const n of group) this.acked.add(n);
          }),
        );
        if (results.some((r) => r.status === 'rejected')) throw new Error('a send failed');
        if (this.paceMs > 0) await sleep(this.paceMs);
      } catch {
        // Not acknowledged. A producer whose send failed may hold a sequence number the broker already used:
        // start over with a new producer id rather than reuse it (KIP-98 leaves that to the application).
        this.failures++;
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

/** Where a client reaches a broker: a loopback port, or `host:port` (a broker in a test network namespace). */
export type BrokerAddress = number | string;

const servers = (addrs: BrokerAddress[]) =>
  addrs.map((a) =>
    typeof a === 'number' ? { host: '127.0.0.1', port: a } : { host: a.slice(0, a.lastIndexOf(':')), port: Number(a.slice(a.lastIndexOf(':') + 1)) },
  );

/** An MQTT QoS 1 publisher that keeps `window` publishes in flight and records what was PUBACKed. */
export class MqttChaosPublisher implements ChaosLoad {
  readonly acked = new Set<number>();
  failures = 0;
  readonly client: MqttClient;
  private next = 0;
  private readonly inflight = new Set<Promise<void>>();
  private running = true;
  private readonly loop: Promise<void>;

  constructor(
    ports: BrokerAddress[],
    private readonly onSend: (n: number) => void,
    private readonly window = 10,
    private readonly paceMs = 0,
  ) {
    this.client = mqtt.connect({
      servers: servers(ports),
      protocolVersion: 4,
      clientId: 'chaos-pub-q1',
      clean: false,
      reconnectPeriod: 200,
      connectTimeout: 3000,
      keepalive: 5,
      // A broker that cannot serve the session yet (its previous owner died, the lease not yet expired) answers
      // CONNACK "server unavailable": MQTT.js stops for good on a refused CONNACK unless told to reconnect.
      reconnectOnConnackError: true,
    });
    this.client.on('error', () => undefined);
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (this.running) {
      if (this.inflight.size >= this.window || !this.client.connected) {
        await Promise.race([...this.inflight, sleep(20)]);
        continue;
      }
      const n = this.next++;
      this.onSend(n);
      const p = this.client
        .publishAsync(CHAOS_MQTT_TOPIC, `q1:${n}`, { qos: 1 })
        .then(
          () => void this.acked.add(n),
          () => void this.failures++,
        )
        .finally(() => this.inflight.delete(p));
      this.inflight.add(p);
      if (this.paceMs > 0) await sleep(this.paceMs);
    }
  }

  get pending(): number {
    return this.inflight.size;
  }

  /** Stops publishing and waits (up to `timeoutMs`) for what is in flight; resolves with what is still pending. */
  async drain(timeoutMs: number): Promise<number> {
    this.running = false;
    await this.loop;
    const deadline = Date.now() + timeoutMs;
    while (this.inflight.size > 0 && Date.now() < deadline) await sleep(50);
    return this.inflight.size;
  }

  async close(): Promise<void> {
    await this.client.endAsync(true).catch(() => undefined);
  }
}

/** A persistent MQTT 5.0 session subscribed at QoS 1 to the publisher's topic: counts each message number it got. */
export class MqttChaosSubscriber {
  readonly received = new Map<number, number>();
  readonly client: MqttClient;

  private constructor(ports: BrokerAddress[]) {
    this.client = mqtt.connect({
      servers: servers(ports),
      protocolVersion: 5,
      clientId: 'chaos-sub',
      clean: false,
      reconnectPeriod: 200,
      connectTimeout: 3000,
      keepalive: 5,
      // A broker that cannot serve the session yet (its previous owner died, the lease not yet expired) answers
      // CONNACK "server unavailable": MQTT.js stops for good on a refused CONNACK unless told to reconnect.
      reconnectOnConnackError: true,
      properties: { sessionExpiryInterval: 86_400 },
    });
    this.client.on('error', () => undefined);
    this.client.on('message', (_topic, payload) => {
      const [who, n] = payload.toString().split(':');
      if (who === 'q1') this.received.set(Number(n), (this.received.get(Number(n)) ?? 0) + 1);
    });
  }

  /** Connected and subscribed: the session exists before anything is published. */
  static async start(ports: BrokerAddress[]): Promise<MqttChaosSubscriber> {
    const s = new MqttChaosSubscriber(ports);
    await new Promise<void>((resolve, reject) => {
      s.client.once('connect', () => resolve());
      s.client.once('error', reject);
    });
    await s.client.subscribeAsync(CHAOS_MQTT_TOPIC, { qos: 1 });
    return s;
  }

  async close(): Promise<void> {
    await this.client.endAsync(true).catch(() => undefined);
  }
}
