/**
 * Issue 17, MQTT sessions across brokers (MQTT.js, v5):
 * - a persistent session (QoS 1 subscription) made on broker 1, offline while messages are published on broker 3,
 *   resumes on broker 2 with session present and its queued messages, in order;
 * - a second CONNECT of a client id on broker 2 takes the session over from broker 1, whose connection is closed
 *   with DISCONNECT reason 0x8E (session taken over);
 * - kill -9 of the broker holding an offline session: its queued messages still arrive after reconnecting elsewhere.
 *
 * Interest travels between brokers asynchronously: before going offline, each session receives a warm-up message
 * published on the broker that will publish the real ones, which proves that broker routes to the session.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type IPublishPacket, type MqttClient } from 'mqtt';
import { startCluster, type ClusterBroker, type TestCluster } from '../helpers/cluster.js';
import { eventually, sleep } from './harness.js';

const SESSION = { protocolVersion: 5 as const, clean: false, reconnectPeriod: 0, properties: { sessionExpiryInterval: 3600 } };

/** Connects with a persistent session; records every message (manual nothing: MQTT.js acks QoS 1 itself). */
async function connectSession(b: ClusterBroker, clientId: string): Promise<{ c: MqttClient; got: IPublishPacket[]; sessionPresent: boolean }> {
  const got: IPublishPacket[] = [];
  const c = mqtt.connect(b.mqttUrl, { ...SESSION, clientId });
  // Messages of a resumed session can come right after CONNACK, before connectAsync would resolve.
  c.on('message', (_t, _p, packet) => got.push(packet));
  const connack = await new Promise<{ sessionPresent: boolean }>((resolve, reject) => {
    c.once('connect', (p) => resolve(p));
    c.once('error', reject);
    c.once('close', () => reject(new Error(`connection to broker ${b.id} closed before CONNACK`)));
  }).catch((err: unknown) => {
    c.end(true);
    throw err;
  });
  return { c, got, sessionPresent: connack.sessionPresent };
}

/** Publishes from `pub` until the session's client sees a warm-up on `topic`: the publishing broker routes to it. */
async function warmUp(pub: MqttClient, topic: string, got: IPublishPacket[]): Promise<void> {
  let n = 0;
  await eventually(
    async () => {
      await pub.publishAsync(topic, `warm-${++n}`, { qos: 1 });
      await sleep(100);
      return got.some((p) => p.payload.toString().startsWith('warm-'));
    },
    15_000,
    `a warm-up on ${topic}`,
  );
}

describe('cluster: MQTT sessions across brokers', { timeout: 120_000 }, () => {
  let c: TestCluster;
  before(async () => {
    c = await startCluster({ brokers: 3, haproxy: false });
  });
  after(async () => {
    await c?.close();
  });

  it('a persistent session made on broker 1 resumes on broker 2 with the messages queued while offline (published on broker 3)', async () => {
    const s1 = await connectSession(c.broker(1), 'roamer');
    assert.equal(s1.sessionPresent, false);
    await s1.c.subscribeAsync('roam/t', { qos: 1 });
    const pub = await mqtt.connectAsync(c.broker(3).mqttUrl, { clientId: 'roam-pub', protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await warmUp(pub, 'roam/t', s1.got);
      await s1.c.endAsync();
      for (let i = 0; i < 5; i++) await pub.publishAsync('roam/t', `m${i}`, { qos: 1 });

      const s2 = await connectSession(c.broker(2), 'roamer');
      try {
        assert.equal(s2.sessionPresent, true, 'the session is present on broker 2');
        await eventually(() => s2.got.filter((p) => p.payload.toString().startsWith('m')).length >= 5, 15_000, 'the 5 queued messages');
        // A marker after them proves nothing else follows.
        await pub.publishAsync('roam/t', 'end', { qos: 1 });
        await eventually(() => s2.got.some((p) => p.payload.toString() === 'end'), 15_000, 'the marker');
        const payloads = s2.got.map((p) => p.payload.toString()).filter((x) => !x.startsWith('warm-'));
        assert.deepEqual(payloads, ['m0', 'm1', 'm2', 'm3', 'm4', 'end']);
        // The session now lives on broker 2.
        assert.equal(await c.ownerOf('session', 'roamer'), 2);
      } finally {
        await s2.c.endAsync();
      }
    } finally {
      await pub.endAsync();
    }
  });

  it('a second CONNECT on broker 2 takes the session over from broker 1: DISCONNECT 0x8E there', async () => {
    const first = await connectSession(c.broker(1), 'taken');
    await first.c.subscribeAsync('take/t', { qos: 1 });
    const disconnected = new Promise<number | undefined>((resolve) => first.c.on('disconnect', (p) => resolve(p.reasonCode)));
    const closed = new Promise<void>((resolve) => first.c.on('close', () => resolve()));
    const second = await connectSession(c.broker(2), 'taken');
    try {
      assert.equal(second.sessionPresent, true, 'the session (with its subscription) moved to broker 2');
      assert.equal(await disconnected, 0x8e, 'session taken over');
      await closed;
      // The subscription came along: a publish on broker 3 reaches the client on broker 2.
      const pub = await mqtt.connectAsync(c.broker(3).mqttUrl, { clientId: 'take-pub', protocolVersion: 5, reconnectPeriod: 0 });
      try {
        await warmUp(pub, 'take/t', second.got);
      } finally {
        await pub.endAsync();
      }
      assert.equal(await c.ownerOf('session', 'taken'), 2);
    } finally {
      first.c.end(true);
      await second.c.endAsync();
    }
  });

  it('kill -9 of the broker holding an offline session: its queued messages arrive after reconnecting to another broker', async () => {
    const s1 = await connectSession(c.broker(1), 'survivor');
    await s1.c.subscribeAsync('surv/t', { qos: 1 });
    const pub = await mqtt.connectAsync(c.broker(2).mqttUrl, { clientId: 'surv-pub', protocolVersion: 5, reconnectPeriod: 0 });
    try {
      await warmUp(pub, 'surv/t', s1.got);
      await s1.c.endAsync();
      // Acknowledged by broker 2 once the owner (broker 1) has the messages durable in the session's queue.
      for (let i = 0; i < 3; i++) await pub.publishAsync('surv/t', `q${i}`, { qos: 1 });
      assert.equal(await c.ownerOf('session', 'survivor'), 1);
      await c.kill(1);

      // Reconnect to broker 3 until a broker accepts (while broker 1's lease runs out the session may be unavailable).
      let s3: Awaited<ReturnType<typeof connectSession>> | null = null;
      const deadline = Date.now() + 20_000;
      while (s3 === null) {
        try {
          s3 = await connectSession(c.broker(3), 'survivor');
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await sleep(250);
        }
      }
      try {
        assert.equal(s3.sessionPresent, true, 'the session survived its broker');
        await eventually(() => s3!.got.filter((p) => p.payload.toString().startsWith('q')).length >= 3, 15_000, 'the 3 queued messages');
        await pub.publishAsync('surv/t', 'end', { qos: 1 });
        await eventually(() => s3!.got.some((p) => p.payload.toString() === 'end'), 15_000, 'the marker');
        assert.deepEqual(
          s3.got.map((p) => p.payload.toString()).filter((x) => !x.startsWith('warm-')),
          ['q0', 'q1', 'q2', 'end'],
        );
      } finally {
        await s3.c.endAsync();
      }
    } finally {
      await pub.endAsync();
    }
  });
});
