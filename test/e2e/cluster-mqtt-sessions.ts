/**
 * MQTT sessions across three `bin/flowmq --cluster` processes over PostgreSQL and s3rver (test/helpers/cluster.ts),
 * with MQTT.js: a persistent session resumed on another broker with the messages queued for it while offline, a
 * session taken over across brokers (v5 DISCONNECT 0x8E on the first broker), and an offline session whose broker is
 * killed with SIGKILL: its placement broker takes it over and it keeps queueing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mqtt, { type IDisconnectPacket, type IPublishPacket, type MqttClient } from 'mqtt';
import pg from 'pg';
import type { TestCluster } from '../helpers/cluster.js';
import { eventually } from './harness.js';

interface LiveFigures {
  peers: Record<string, number>;
}

/** The scenario, on the started cluster `cluster()` (cluster-shared.test.ts starts it). */
export function sessionsScenario(cluster: () => TestCluster): void {
  describe('MQTT sessions across three brokers', () => {
    let c: TestCluster;
    const clients: MqttClient[] = [];

    const mq = async (broker: number, opts: mqtt.IClientOptions = {}) => {
      const client = await mqtt.connectAsync(c.broker(broker).mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 10_000, ...opts });
      clients.push(client);
      return client;
    };
    /** A persistent v5 session (expiry one hour, no clean start). */
    const persistent = (clientId: string): mqtt.IClientOptions => ({ clientId, clean: false, properties: { sessionExpiryInterval: 3600 } });
    /**
     * A client whose handlers are in place before it connects (what a resumed session re-sends right after CONNACK is
     * not missed), reconnecting every 250 ms while the session is still moving (CONNACK 0x88, retriable).
     */
    const resume = (broker: number, clientId: string) => {
      const client = mqtt.connect(c.broker(broker).mqttUrl, { protocolVersion: 5, reconnectPeriod: 250, connectTimeout: 10_000, ...persistent(clientId) });
      clients.push(client);
      const got: IPublishPacket[] = [];
      client.on('message', (_t, _p, packet) => got.push(packet));
      let present: boolean | undefined;
      client.on('connect', (ack) => (present ??= ack.sessionPresent));
      client.on('error', () => undefined);
      return { client, got, present: () => present };
    };
    const live = async (broker: number) => (await c.api<{ live: LiveFigures }>('/api/v1/broker', broker)).live;
    const filters = async (at: number, of: number) => (await live(at)).peers[String(of)] ?? 0;
    /** Until broker `at` knows at least `n` live filters of broker `of` (the interest table). */
    const knows = (at: number, of: number, n: number) =>
      eventually(async () => ((await live(at)).peers[String(of)] ?? 0) >= n, 15_000, `broker ${at} knows broker ${of}'s filters`);
    const collect = (client: MqttClient) => {
      const got: IPublishPacket[] = [];
      client.on('message', (_t, _p, packet) => got.push(packet));
      return got;
    };

    before(async () => {
      c = cluster();
      await c.waitNoLiveInterest();
    });

    after(async () => {
      for (const m of clients) await m.endAsync(true).catch(() => undefined);
    });

    it('a persistent session subscribed on broker 1 resumes on broker 2 with what was published on broker 3 meanwhile', async () => {
      const first = await mq(1, persistent('resume-1'));
      await first.subscribeAsync('resume/#', { qos: 1 });
      assert.equal(await c.ownerOf('session', 'resume-1'), 1);
      await first.endAsync();
      await knows(3, 1, 1);
      const pub = await mq(3);
      for (let i = 0; i < 10; i++) await pub.publishAsync(`resume/${i}`, `m${i}`, { qos: 1 });
      await pub.publishAsync('resume/end', 'end', { qos: 1 });

      const n2 = await filters(3, 2);
      const second = resume(2, 'resume-1');
      const got = second.got;
      await eventually(() => got.some((p) => p.topic === 'resume/end'), 15_000, 'the queued messages on broker 2');
      assert.equal(second.present(), true, 'CONNACK on broker 2 says the session was present');
      assert.deepEqual(
        got.map((p) => p.payload.toString()),
        [...Array.from({ length: 10 }, (_, i) => `m${i}`), 'end'],
      );
      assert.equal(await c.ownerOf('session', 'resume-1'), 2, 'the session moved to broker 2');
      // The subscription moved with it: a new publish on broker 3 reaches the client on broker 2.
      await knows(3, 2, n2 + 1);
      await pub.publishAsync('resume/after', 'after', { qos: 1 });
      await eventually(() => got.some((p) => p.topic === 'resume/after'), 15_000, 'a live message after the move');
    });

    it('a second CONNECT on broker 2 takes over the client connected to broker 1 (v5 DISCONNECT 0x8E)', async () => {
      const first = await mq(1, persistent('takeover-1'));
      await first.subscribeAsync('take/#', { qos: 1 });
      let reason: number | undefined;
      first.on('disconnect', (p: IDisconnectPacket) => (reason = p.reasonCode));
      const n2 = await filters(3, 2);
      const second = await mq(2, persistent('takeover-1'));
      await eventually(() => reason !== undefined, 10_000, 'DISCONNECT on broker 1');
      assert.equal(reason, 0x8e, 'Session taken over');
      assert.equal(await c.ownerOf('session', 'takeover-1'), 2);
      // The session (its subscription) is on broker 2 now.
      const got = collect(second);
      await knows(3, 2, n2 + 1);
      const pub = await mq(3);
      await pub.publishAsync('take/x', 'x', { qos: 1 });
      await eventually(() => got.some((p) => p.topic === 'take/x'), 15_000, 'delivery to the new connection');
    });

    it("kill -9 of an offline session's broker: its placement broker takes the session over and it still gets what is published", async () => {
      const first = await mq(1, persistent('orphan-1'));
      await first.subscribeAsync('orphan/#', { qos: 1 });
      await first.endAsync();
      await knows(3, 1, 1);
      const pub = await mq(3);
      await pub.publishAsync('orphan/before', 'before', { qos: 1 });
      // Forwarded to broker 1 one-way (live), queued there in the session's store queue: wait until it is stored.
      const db = new pg.Client({ connectionString: c.dbUrl });
      await db.connect();
      try {
        await eventually(
          async () => Number((await db.query("SELECT count(*) AS n FROM session_queue WHERE client_id = 'orphan-1'")).rows[0].n) === 1,
          15_000,
          'the message queued by broker 1',
        );
      } finally {
        await db.end();
      }

      const before = { 2: await filters(3, 2) };
      await c.kill(1);
      await c.waitBrokerDead(1, 30_000);
      // The session is an orphan until its placement broker (2 or 3) takes it and loads it offline.
      let heir: number | null = null;
      await eventually(
        async () => {
          heir = await c.ownerOf('session', 'orphan-1', 3);
          return heir !== null && heir !== 1;
        },
        30_000,
        'a surviving broker owns the session',
      );
      // Published on broker 3: once it knows the heir's filter (or the heir is broker 3 itself).
      if (heir === 2) await knows(3, 2, before[2] + 1);
      for (let i = 0; i < 5; i++) await pub.publishAsync(`orphan/${i}`, `m${i}`, { qos: 1 });
      await pub.publishAsync('orphan/end', 'end', { qos: 1 });

      const back = resume(2, 'orphan-1');
      const got = back.got;
      await eventually(() => got.some((p) => p.topic === 'orphan/end'), 30_000, 'the queued messages after the failover');
      assert.equal(back.present(), true);
      assert.deepEqual(
        got.map((p) => p.payload.toString()),
        ['before', ...Array.from({ length: 5 }, (_, i) => `m${i}`), 'end'],
      );
    });
  });
}
