// test-runner: apart (scripts/test.mjs): a cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Deleting a namespace through one broker of a cluster disconnects its clients on the others (issue 29,
 * src/control/namespace-removal.ts followNamespaceRemovals): two brokers on PostgreSQL and s3rver; ann of namespace t1
 * has an amqplib connection in vhost t1 and an MQTT.js client on broker 2; t1 (its user first) is deleted through
 * broker 1's admin API. Broker 2 learns it from the `control` notify and closes the AMQP connection with 320
 * CONNECTION_FORCED and RabbitMQ's text, and the MQTT client's connection; a client of `default` on broker 2 stays.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import amqp, { type ChannelModel } from 'amqplib';
import mqtt, { type MqttClient } from 'mqtt';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { eventually } from './harness.js';

/** `p`, or a failure naming `what` after `ms` (a bound on waiting, not a proof of absence). */
const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([p, new Promise<never>((_r, reject) => setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms).unref())]);

describe('cluster: a deleted namespace loses its clients on every broker', { timeout: 120_000 }, () => {
  let c: TestCluster;
  const mqtts: MqttClient[] = [];
  const amqps: ChannelModel[] = [];

  const mq = async (user: string, broker: number): Promise<MqttClient> => {
    const m = await mqtt.connectAsync(c.broker(broker).mqttUrl, { username: user, password: `${user}-pw`, reconnectPeriod: 0 });
    mqtts.push(m);
    return m;
  };

  before(async () => {
    c = await startCluster({ brokers: 2, haproxy: false });
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

  test('DELETE /api/v1/namespaces/t1 through broker 1: broker 2 closes its t1 connections (AMQP 320)', async () => {
    const conn = await amqp.connect(`amqp://ann:ann-pw@127.0.0.1:${c.broker(2).proc.ports.amqp}/t1?heartbeat=0`);
    conn.on('error', () => undefined);
    amqps.push(conn);
    const amqpClosed = new Promise<string>((resolve) => conn.on('close', (e?: Error) => resolve(e?.message ?? 'closed without an error')));
    const ch = await conn.createChannel();
    ch.on('error', () => undefined);
    await ch.assertQueue('q1', { durable: true });
    const annMqtt = await mq('ann', 2);
    const mqttClosed = new Promise<void>((resolve) => annMqtt.once('close', () => resolve()));
    const deeMqtt = await mq('dee', 2);

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
  });
});
