/**
 * Issue 17: publish on broker A, consume on broker B, for every protocol pair (MQTT, Kafka, AMQP, NATS: 16 pairs),
 * each through its own mechanism:
 *
 * - to MQTT: a live subscription on B of `pairs/<src>/mqtt` (interest forwarded from B to A);
 * - to NATS: a live subscription on B of `pairs.<src>.nats`;
 * - to AMQP: a durable queue `pairs-<src>-amqp` declared on B, bound on amq.topic to `pairs.<src>.amqp` (the queue
 *   is owned by whichever broker placement picks: a publish on A reaching it is forwarded to its owner, B consumes
 *   it through a remote consumer if B does not own it);
 * - to Kafka: a stream (topic) `pairs.<src>.kafka` created on B, which captures the unified topic of the same name,
 *   read back with kcat bootstrapped at B (a Kafka client follows Metadata to the partition's leader = its owner).
 *
 * A is broker 1, B broker 2; broker 3 may own the queues and partitions. Live subscriptions reach A through the
 * interest table asynchronously: a warm-up publish repeated until the subscriber on B sees it proves the interest
 * arrived (it is filtered out), then every source publishes its message and a marker after it; every real message
 * must arrive exactly once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type IPublishPacket, type MqttClient } from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { connect as natsConnect, type NatsConnection } from 'nats';
import amqp from 'amqplib';
import type { ClusterBroker, TestCluster } from '../helpers/cluster.js';
import { eventually, kcatConsume, sleep } from './harness.js';

function timeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms).unref())]);
}

const { Kafka, logLevel } = kafkajsPkg;

const SOURCES = ['mqtt', 'kafka', 'amqp', 'nats'] as const;
const DESTS = ['mqtt', 'kafka', 'amqp', 'nats'] as const;
type Proto = (typeof SOURCES)[number];

const amqpUrlOf = (b: ClusterBroker): string => `amqp://guest:guest@127.0.0.1:${b.proc.ports.amqp}`;

/** The scenario, on the started cluster `cluster()` (cluster-shared.test.ts starts it). */
export function pairsScenario(cluster: () => TestCluster): void {
  describe('cluster: publish on broker A, consume on broker B, every protocol pair', { timeout: 120_000 }, () => {
    let c: TestCluster;
    let A: ClusterBroker;
    let B: ClusterBroker;
    // Publishers on A.
    let mqttPub: MqttClient;
    let kafkaProducer: ReturnType<InstanceType<typeof Kafka>['producer']>;
    let amqpPubConn: amqp.ChannelModel;
    let amqpPub: amqp.ConfirmChannel;
    let natsPub: NatsConnection;
    // Consumers on B.
    let mqttSub: MqttClient;
    const mqttGot: IPublishPacket[] = [];
    let natsSub: NatsConnection;
    const natsGot: Array<{ subject: string; data: string }> = [];
    let amqpSubConn: amqp.ChannelModel;
    let amqpSub: amqp.Channel;
    const amqpGot = new Map<Proto, string[]>();

    before(async () => {
      c = cluster();
      A = c.broker(1);
      B = c.broker(2);

      // The destinations, declared on B.
      const kafkaB = new Kafka({ brokers: [B.kafka], clientId: 'pairs-admin', logLevel: logLevel.NOTHING, retry: { retries: 10 } });
      const admin = kafkaB.admin();
      await admin.connect();
      await admin.createTopics({ topics: SOURCES.map((s) => ({ topic: `pairs.${s}.kafka`, numPartitions: 1 })), waitForLeaders: true });
      await admin.disconnect();

      amqpSubConn = await amqp.connect(amqpUrlOf(B));
      amqpSub = await amqpSubConn.createChannel();
      for (const s of SOURCES) {
        const q = `pairs-${s}-amqp`;
        await amqpSub.assertQueue(q, { durable: true });
        await amqpSub.bindQueue(q, 'amq.topic', `pairs.${s}.amqp`);
        amqpGot.set(s, []);
        await amqpSub.consume(q, (m) => {
          if (m === null) return;
          amqpGot.get(s)!.push(m.content.toString());
          amqpSub.ack(m);
        });
      }

      mqttSub = await mqtt.connectAsync(B.mqttUrl, { clientId: 'pairs-sub', protocolVersion: 5, reconnectPeriod: 0 });
      mqttSub.on('message', (_t, _p, packet) => mqttGot.push(packet));
      await mqttSub.subscribeAsync('pairs/+/mqtt', { qos: 1 });

      natsSub = await natsConnect({ servers: B.natsServer, reconnect: false });
      natsSub.subscribe('pairs.*.nats', {
        callback: (err, m) => void (err === null && natsGot.push({ subject: m.subject, data: Buffer.from(m.data).toString() })),
      });
      await natsSub.flush();

      // The publishers, on A.
      mqttPub = await mqtt.connectAsync(A.mqttUrl, { clientId: 'pairs-pub', protocolVersion: 5, reconnectPeriod: 0 });
      const kafkaA = new Kafka({ brokers: [A.kafka], clientId: 'pairs-pub', logLevel: logLevel.NOTHING, retry: { retries: 10 } });
      kafkaProducer = kafkaA.producer();
      await kafkaProducer.connect();
      amqpPubConn = await amqp.connect(amqpUrlOf(A));
      amqpPub = await amqpPubConn.createConfirmChannel();
      natsPub = await natsConnect({ servers: A.natsServer, reconnect: false });
    });

    it('the streams, queues and bindings declared on B reach every broker and get owners', async () => {
      await c.waitCatalog({
        streams: SOURCES.map((s) => `pairs.${s}.kafka`),
        queues: SOURCES.map((s) => `pairs-${s}-amqp`),
        bindings: SOURCES.map((s) => ({ queue: `pairs-${s}-amqp`, key: `pairs.${s}.amqp` })),
      });
      await c.waitSettled({ min: { partition: 4, queue: 4 } });
    });

    it("B's live subscriptions reach A (a warm-up publish from A until B's subscribers see one)", async () => {
      let n = 0;
      await eventually(
        async () => {
          n++;
          await mqttPub.publishAsync('pairs/warmup/mqtt', `warm-${n}`, { qos: 1 });
          natsPub.publish('pairs.warmup.nats', `warm-${n}`);
          await natsPub.flush();
          await sleep(100);
          return mqttGot.some((p) => p.topic === 'pairs/warmup/mqtt') && natsGot.some((m) => m.subject === 'pairs.warmup.nats');
        },
        15_000,
        "B's live subscriptions known on A",
      );
    });

    after(async () => {
      await Promise.allSettled([mqttPub?.endAsync(), mqttSub?.endAsync(), kafkaProducer?.disconnect(), natsPub?.close(), natsSub?.close()]);
      await Promise.allSettled([amqpPubConn?.close(), amqpSubConn?.close()]);
    });

    /** Publishes `payload` from protocol `src` on A to the unified topic pairs/<src>/<dst>; resolves once acknowledged. */
    async function publish(src: Proto, dst: Proto, payload: string): Promise<void> {
      switch (src) {
        case 'mqtt':
          await mqttPub.publishAsync(`pairs/${src}/${dst}`, payload, { qos: 1 });
          return;
        case 'kafka':
          // A Kafka produce writes the stream of that name (captured there for the Kafka destination) and reaches the
          // live subscribers and queues of the unified topic.
          if (dst === 'kafka') await kafkaProducer.send({ topic: `pairs.${src}.${dst}`, acks: -1, messages: [{ value: payload }] });
          else {
            await ensureTopic(`pairs.${src}.${dst}`);
            await kafkaProducer.send({ topic: `pairs.${src}.${dst}`, acks: -1, messages: [{ value: payload }] });
          }
          return;
        case 'amqp':
          amqpPub.publish('amq.topic', `pairs.${src}.${dst}`, Buffer.from(payload), { deliveryMode: 2 });
          await amqpPub.waitForConfirms();
          return;
        case 'nats':
          natsPub.publish(`pairs.${src}.${dst}`, payload);
          await natsPub.flush();
          return;
      }
    }

    const created = new Set<string>();
    async function ensureTopic(topic: string): Promise<void> {
      if (created.has(topic)) return;
      const admin = new Kafka({ brokers: [A.kafka], clientId: 'pairs-admin-a', logLevel: logLevel.NOTHING, retry: { retries: 10 } }).admin();
      await admin.connect();
      try {
        await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
      } finally {
        await admin.disconnect();
      }
      created.add(topic);
    }

    /** Why a pair's publish failed (its test reports it). */
    const sendErrors = new Map<string, string>();
    /** The pairs' tests wait for their messages until then. */
    let deadline = 0;

    it('sends one message per pair from A, each acknowledged, then a marker per pair', async () => {
      await Promise.all(
        SOURCES.flatMap((src) =>
          DESTS.map(async (dst) => {
            try {
              await timeout(publish(src, dst, `${src}->${dst}`), 15_000, 'acknowledgement');
              await timeout(publish(src, dst, `end:${src}->${dst}`), 15_000, 'acknowledgement of the marker');
            } catch (err) {
              sendErrors.set(`${src}->${dst}`, (err as Error).message);
            }
          }),
        ),
      );
      deadline = Date.now() + 15_000;
      assert.deepEqual([...sendErrors], [], 'every publish on A was acknowledged');
    });

    for (const dst of DESTS) {
      for (const src of SOURCES) {
        it(`${src} on A -> ${dst} on B`, async () => {
          const want = `${src}->${dst}`;
          const end = `end:${want}`;
          assert.equal(sendErrors.get(want), undefined, `the publish on A failed: ${sendErrors.get(want)}`);
          let seen: string[] = [];
          const read = async (): Promise<string[]> => {
            switch (dst) {
              case 'mqtt':
                return mqttGot.filter((p) => p.topic === `pairs/${src}/mqtt`).map((p) => p.payload.toString());
              case 'nats':
                return natsGot.filter((m) => m.subject === `pairs.${src}.nats`).map((m) => m.data);
              case 'amqp':
                return [...amqpGot.get(src)!];
              case 'kafka':
                return (await kcatConsume(B.kafka, `pairs.${src}.kafka`)).map((m) => m.payload ?? '');
            }
          };
          await eventually(
            async () => {
              seen = await read();
              return seen.includes(end);
            },
            Math.max(1000, deadline - Date.now()),
            `${want}: the marker on B`,
          ).catch((e: Error) => {
            throw new Error(`${e.message}; B received ${JSON.stringify(seen)}`);
          });
          // Exactly once, and before the marker published after it by the same client.
          assert.deepEqual(seen, [want, end], `${want}: what B received`);
        });
      }
    }
  });
}
