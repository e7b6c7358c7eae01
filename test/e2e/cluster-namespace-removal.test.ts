// test-runner: apart (scripts/test.mjs): a cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Deleting a namespace through one broker of a cluster disconnects its clients on the others (issue 29,
 * src/control/namespace-removal.ts followNamespaceRemovals): two brokers on PostgreSQL and s3rver; ann of namespace t1
 * has an amqplib connection in vhost t1 and an MQTT.js client on broker 2; t1 (its user first) is deleted through
 * broker 1's admin API. Broker 2 learns it from the `control` notify and closes the AMQP connection with 320
 * CONNECTION_FORCED and RabbitMQ's text, and the MQTT client's connection; a client of `default` on broker 2 stays.
 * A consumer group of t1 coordinated by broker 2 (kafkajs, committed and left) is gone with the namespace: made again,
 * t1's ListGroups on both brokers is empty (broker 1 deleted the offsets, broker 2 dropped the group it held).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import amqp, { type ChannelModel } from 'amqplib';
import kafkajsPkg from 'kafkajs';
import mqtt, { type IConnackPacket, type MqttClient } from 'mqtt';
import { rendezvous } from '../../src/cluster/index.js';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { eventually } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

/** `p`, or a failure naming `what` after `ms` (a bound on waiting, not a proof of absence). */
const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([p, new Promise<never>((_r, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms).unref())]);

describe('cluster: a deleted namespace loses its clients on every broker', { timeout: 120_000 }, () => {
  let c: TestCluster;
  const mqtts: MqttClient[] = [];
  const amqps: ChannelModel[] = [];

  const mq = async (user: string, broker: number, opts: mqtt.IClientOptions = {}): Promise<MqttClient> => {
    const m = await mqtt.connectAsync(c.broker(broker).mqttUrl, { username: user, password: `${user}-pw`, reconnectPeriod: 0, ...opts });
    mqtts.push(m);
    return m;
  };

  const kafka = () =>
    new Kafka({
      clientId: 'rm-ann',
      brokers: [c.broker(1).kafka, c.broker(2).kafka],
      sasl: { mechanism: 'plain', username: 'ann', password: 'ann-pw' },
      logLevel: logLevel.NOTHING,
      retry: { retries: 5 },
    });
  /** A group name of t1 that broker 2 coordinates (placement by rendezvous over brokers 1 and 2, as Cluster.placement). */
  const groupOn2 = (): string => {
    for (let i = 0; ; i++) if (rendezvous('group', `$ns/t1/billing${i}`, [1, 2]) === 2) return `billing${i}`;
  };

  before(async () => {
    c = await startCluster({ brokers: 2, haproxy: false, args: ['--kafka-group-initial-rebalance-delay', '0'] });
    const b1 = c.broker(1).proc;
    await b1.api('POST', '/api/v1/users', { username: 'root', password: 'root-pw', groups: ['admins'] });
    for (const b of c.brokers) b.proc.credentials = { username: 'root', password: 'root-pw' };
    await b1.api('POST', '/api/v1/namespaces', { name: 't1' });
    await b1.api('POST', '/api/v1/users', { username: 'ann', password: 'ann-pw', namespace: 't1' });
    await b1.api('POST', '/api/v1/users', { username: 'dee', password: 'dee-pw' });
    // The directory reaches broker 2 by notify: ann logs in there before the scenario.
    await eventually(
      async () => {
        const m = await mq('ann', 2).catch(() => null);
        await m?.endAsync();
        return m !== null;
      },
      15_000,
      'ann logs in on broker 2',
    );
  });

  after(async () => {
    for (const m of mqtts) m.end(true);
    for (const a of amqps) await a.close().catch(() => undefined);
    await c?.close();
  });

  test('DELETE /api/v1/namespaces/t1 through broker 1: broker 2 closes its t1 connections (AMQP 320) and drops the t1 group it coordinates', async () => {
    const conn = await amqp.connect(`amqp://ann:ann-pw@127.0.0.1:${c.broker(2).proc.ports.amqp}/t1?heartbeat=0`);
    conn.on('error', () => undefined);
    amqps.push(conn);
    const amqpClosed = new Promise<string>((resolve) => conn.on('close', (e?: Error) => resolve(e?.message ?? 'closed without an error')));
    const ch = await conn.createChannel();
    ch.on('error', () => undefined);
    await ch.assertQueue('q1', { durable: true });
    // A persistent session (client id dev1), connected on broker 2 while t1 is deleted.
    const annMqtt = await mq('ann', 2, { clientId: 'dev1', clean: false });
    await annMqtt.subscribeAsync('inbox/#', { qos: 1 });
    const mqttClosed = new Promise<void>((resolve) => annMqtt.once('close', () => resolve()));
    const deeMqtt = await mq('dee', 2);
    // t1's group, coordinated by broker 2: committed, then left (Empty, held in broker 2's memory).
    const group = groupOn2();
    const k = kafka();
    const admin = k.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'orders', numPartitions: 1 }] });
    const producer = k.producer();
    await producer.connect();
    await producer.send({ topic: 'orders', messages: [{ value: 'o1' }] });
    await producer.disconnect();
    const consumer = k.consumer({ groupId: group });
    await consumer.connect();
    await consumer.subscribe({ topic: 'orders', fromBeginning: true });
    await new Promise<void>((resolve) => void consumer.run({ eachMessage: async () => resolve() }));
    await consumer.commitOffsets([{ topic: 'orders', partition: 0, offset: '1' }]);
    await consumer.disconnect();
    assert.deepEqual(
      (await admin.listGroups()).groups.map((g) => g.groupId),
      [group],
    );
    await admin.disconnect();

    // A user's home is not deleted under it: ann goes first (her open connections stay, refused everything).
    await c.broker(1).proc.api('DELETE', '/api/v1/users/ann');
    await c.broker(1).proc.api('DELETE', '/api/v1/namespaces/t1');

    // Before: broker 2 kept both (only the deleting broker disconnected its clients).
    assert.match(
      await within(amqpClosed, 15_000, 'the AMQP connection on broker 2 closed'),
      /320 \(CONNECTION-FORCED\) with message "CONNECTION_FORCED - vhost 't1' is deleted"/,
    );
    await within(mqttClosed, 15_000, 'the MQTT client on broker 2 disconnected');
    assert.equal(annMqtt.connected, false);
    // `default`'s client on broker 2 is still there: its own publish comes back.
    const echo = new Promise<string>((resolve) => deeMqtt.once('message', (_t, p) => resolve(p.toString())));
    await deeMqtt.subscribeAsync('echo', { qos: 1 });
    await deeMqtt.publishAsync('echo', 'still here', { qos: 1 });
    assert.equal(await echo, 'still here');

    // Made again (ann too): no group of the old t1 on either broker.
    await c.broker(1).proc.api('POST', '/api/v1/namespaces', { name: 't1' });
    await c.broker(1).proc.api('POST', '/api/v1/users', { username: 'ann', password: 'ann-pw', namespace: 't1' });
    // The directory reaches broker 2 by notify: ann logs in there before Kafka asks both brokers.
    await eventually(
      async () => {
        const m = await mq('ann', 2).catch(() => null);
        await m?.endAsync();
        return m !== null;
      },
      15_000,
      'ann logs in on broker 2 again',
    );
    // The session of dev1 went with t1, though its connection ended on broker 2 after broker 1 deleted the sessions.
    const dev = mqtt.connect(c.broker(2).mqttUrl, { username: 'ann', password: 'ann-pw', clientId: 'dev1', clean: false, reconnectPeriod: 0 });
    mqtts.push(dev);
    const connack = await new Promise<IConnackPacket>((resolve, reject) => {
      dev.once('connect', resolve);
      dev.once('error', reject);
    });
    assert.equal(connack.sessionPresent, false);
    const again = kafka().admin();
    await again.connect();
    try {
      // Before: [billingN] (broker 2 still held the group it coordinated).
      assert.deepEqual((await again.listGroups()).groups, []);
    } finally {
      await again.disconnect();
    }
  });
});
