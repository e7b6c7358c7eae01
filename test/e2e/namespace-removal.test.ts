/**
 * Deleting a namespace takes its Kafka consumer groups, MQTT retained messages and MQTT sessions with it (issue 29,
 * src/control/namespace-removal.ts): namespace t1 with user ann leaves a retained message, a committed offset of group
 * `billing`, and a persistent MQTT session (a subscription and a QoS 1 message queued while it is offline); the
 * namespace is deleted through the admin API, made again with its user, and kafkajs and MQTT.js find nothing of the
 * old one: no group, no committed offset, sessionPresent false, no queued or retained message (markers published after
 * prove what did not come). The `default` namespace's same names are left alone.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Kafka, logLevel } from 'kafkajs';
import mqtt, { type IConnackPacket, type MqttClient } from 'mqtt';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('e2e: a deleted namespace takes its groups, retained messages and MQTT sessions', { timeout: 60_000 }, () => {
  let dir = '';
  let broker: Broker;
  let mqttUrl = '';
  let kafkaAddr = '';
  let adminApi = '';
  const clients: MqttClient[] = [];

  const http = async (method: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Basic ${Buffer.from('root:root-pw').toString('base64')}` };
    if (method !== 'GET') headers['content-type'] = 'application/json';
    const r = await fetch(adminApi + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, json: (text === '' ? null : JSON.parse(text)) as Json };
  };
  const mq = async (user: string, opts: mqtt.IClientOptions = {}): Promise<MqttClient> => {
    const c = await mqtt.connectAsync(mqttUrl, { username: user, password: `${user}-pw`, reconnectPeriod: 0, ...opts });
    clients.push(c);
    return c;
  };
  const kafka = (user: string) =>
    new Kafka({
      clientId: `rm-${user}`,
      brokers: [kafkaAddr],
      sasl: { mechanism: 'plain', username: user, password: `${user}-pw` },
      logLevel: logLevel.NOTHING,
    });
  /** ann and t1, as the admin API makes them. */
  const makeTenant = async () => {
    assert.equal((await http('POST', '/api/v1/namespaces', { name: 't1' })).status, 201);
    assert.equal((await http('POST', '/api/v1/users', { username: 'ann', password: 'ann-pw', namespace: 't1' })).status, 201);
  };
  /**
   * A client that records every topic it receives from its CONNECT on (a resumed session's queued messages come right
   * after the CONNACK), with the CONNACK.
   */
  const watched = async (user: string, opts: mqtt.IClientOptions = {}) => {
    const c = mqtt.connect(mqttUrl, { username: user, password: `${user}-pw`, reconnectPeriod: 0, ...opts });
    clients.push(c);
    const seen: string[] = [];
    c.on('message', (topic) => seen.push(topic));
    const connack = await new Promise<IConnackPacket>((resolve, reject) => {
      c.once('connect', resolve);
      c.once('error', reject);
    });
    /**
     * Subscribes to `filter` (retained messages come after the SUBACK), then publishes the live marker `marker` and
     * answers the topics received up to it, in arrival order.
     */
    const upToMarker = async (filter: string, marker: string): Promise<string[]> => {
      const done = new Promise<void>((resolve) => c.on('message', (topic) => topic === marker && resolve()));
      await c.subscribeAsync(filter, { qos: 1 });
      await c.publishAsync(marker, 'marker', { qos: 1 });
      await done;
      return seen;
    };
    return { connack, upToMarker };
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-removal-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      ['users:', '  - {username: root, password: root-pw, groups: [admins]}', '  - {username: dee, password: dee-pw}', ''].join('\n'),
    );
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'mqtt,kafka',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'kafka-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'kafka-group-initial-rebalance-delay': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    mqttUrl = `mqtt://127.0.0.1:${broker.listeners.get('mqtt')!.address().port}`;
    kafkaAddr = `127.0.0.1:${broker.listeners.get('kafka')!.address().port}`;
    adminApi = `http://127.0.0.1:${broker.ports().http}`;
    await makeTenant();
  });

  after(async () => {
    for (const c of clients) await c.endAsync(true).catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('made again under the same name, t1 has no group, offset, session or retained message of the deleted one', async () => {
    // t1 and `default` both: a persistent session `dev1` subscribed to inbox/#, a retained state/x, group billing on
    // topic orders with a committed offset.
    for (const user of ['ann', 'dee']) {
      const dev = await mq(user, { clientId: 'dev1', clean: false });
      await dev.subscribeAsync('inbox/#', { qos: 1 });
      await dev.endAsync();
      const pub = await mq(user);
      await pub.publishAsync('state/x', `${user}-retained`, { qos: 1, retain: true });
      // Queued for the offline session dev1.
      await pub.publishAsync('inbox/a', `${user}-queued`, { qos: 1 });
      await pub.endAsync();
      const k = kafka(user);
      const admin = k.admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic: 'orders', numPartitions: 1 }] });
      const producer = k.producer();
      await producer.connect();
      await producer.send({ topic: 'orders', messages: [{ value: 'o1' }, { value: 'o2' }] });
      await producer.disconnect();
      const consumer = k.consumer({ groupId: 'billing' });
      await consumer.connect();
      await consumer.subscribe({ topic: 'orders', fromBeginning: true });
      let got = 0;
      await new Promise<void>((resolve) => {
        void consumer.run({
          eachMessage: async () => {
            if (++got === 2) resolve();
          },
        });
      });
      await consumer.commitOffsets([{ topic: 'orders', partition: 0, offset: '2' }]);
      // Leaves the group: billing is Empty, known by its committed offset.
      await consumer.disconnect();
      assert.deepEqual(
        (await admin.fetchOffsets({ groupId: 'billing', topics: ['orders'] }))[0]!.partitions.map((p) => p.offset),
        ['2'],
      );
      assert.ok((await admin.listGroups()).groups.some((g) => g.groupId === 'billing'));
      await admin.disconnect();
    }
    const sessions = await http('GET', '/api/v1/mqtt/sessions?limit=1000');
    assert.ok(
      sessions.json.items.some((s: Json) => s.clientId === '$ns/t1/dev1'),
      JSON.stringify(sessions.json),
    );

    assert.equal((await http('DELETE', '/api/v1/users/ann')).status, 204);
    const del = await http('DELETE', '/api/v1/namespaces/t1');
    assert.equal(del.status, 204, JSON.stringify(del.json));
    assert.ok(!(await http('GET', '/api/v1/mqtt/sessions?limit=1000')).json.items.some((s: Json) => s.clientId === '$ns/t1/dev1'));
    await makeTenant();

    // Kafka: the topic made again has no committed offset of billing, and no group billing is listed.
    const admin = kafka('ann').admin();
    await admin.connect();
    try {
      assert.deepEqual((await admin.listGroups()).groups, []);
      await admin.createTopics({ topics: [{ topic: 'orders', numPartitions: 1 }] });
      assert.deepEqual(
        (await admin.fetchOffsets({ groupId: 'billing', topics: ['orders'] }))[0]!.partitions.map((p) => p.offset),
        ['-1'],
      );
    } finally {
      await admin.disconnect();
    }
    // MQTT: no session to resume (nothing queued comes before the marker), no retained state/x (only state/y, retained
    // after the namespace was made again, comes before the live marker).
    const dev = await watched('ann', { clientId: 'dev1', clean: false });
    assert.equal(dev.connack.sessionPresent, false);
    assert.deepEqual(await dev.upToMarker('inbox/#', 'inbox/marker'), ['inbox/marker']);
    const pub = await mq('ann');
    await pub.publishAsync('state/y', 'new', { qos: 1, retain: true });
    assert.deepEqual(await (await watched('ann')).upToMarker('state/#', 'state/marker'), ['state/y', 'state/marker']);

    // `default`'s same names are untouched: its session resumes with its queued message, its retained state/x stays.
    const dee = await watched('dee', { clientId: 'dev1', clean: false });
    assert.equal(dee.connack.sessionPresent, true);
    assert.deepEqual(await dee.upToMarker('inbox/#', 'inbox/marker'), ['inbox/a', 'inbox/marker']);
    assert.deepEqual(await (await watched('dee')).upToMarker('state/#', 'state/marker'), ['state/x', 'state/marker']);
    const deeAdmin = kafka('dee').admin();
    await deeAdmin.connect();
    try {
      assert.ok((await deeAdmin.listGroups()).groups.some((g) => g.groupId === 'billing'));
      assert.deepEqual(
        (await deeAdmin.fetchOffsets({ groupId: 'billing', topics: ['orders'] }))[0]!.partitions.map((p) => p.offset),
        ['2'],
      );
    } finally {
      await deeAdmin.disconnect();
    }
  });
});
