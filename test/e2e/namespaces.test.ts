/**
 * Namespaces as tenants (issue 29, first slice: MQTT and Kafka), with real clients: MQTT.js, KafkaJS and kcat.
 * One broker in this process with three namespaces in use: `default` (user dee), `t1` (user ann) and `t2` (user
 * bob). Every tenant runs the same names (topic `orders/...`, retained `state/x`, client id `c1`, stream `orders`,
 * group `g`) and sees exactly its own messages and names; MQTT -> Kafka inside t1 works; a client spelling the
 * internal name of another namespace's topic, client id, stream or group is refused. The first part writes data
 * while every user is in `default` (the layout of the version before namespaces), then restarts the broker on the
 * same data directory with the namespaces added: what was there is `default`'s.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IPublishPacket, type MqttClient } from 'mqtt';
import { pino } from 'pino';
import kafkajsPkg, { type Kafka as KafkaClient } from 'kafkajs';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { run, until } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const USERS = { dee: 'default', ann: 't1', bob: 't2' } as const;
type User = keyof typeof USERS;
const TENANTS = Object.keys(USERS) as User[];

function collect(c: MqttClient): IPublishPacket[] {
  const got: IPublishPacket[] = [];
  c.on('message', (_t, _p, packet) => got.push(packet));
  return got;
}
/**
 * Reads a topic from the beginning with a consumer group until a record `end` (sent by the caller after everything
 * else) arrives; answers the values before it. Without `end`, until the first `want` records.
 */
async function consumeAll(k: KafkaClient, topic: string, groupId: string, want = 1, end?: string): Promise<string[]> {
  const consumer = k.consumer({ groupId, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got: string[] = [];
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  await consumer.run({
    eachMessage: async ({ message }) => {
      const v = message.value?.toString() ?? '';
      if (end !== undefined && v === end) done();
      else got.push(v);
      if (end === undefined && got.length >= want) done();
    },
  });
  await Promise.race([finished, new Promise((_, reject) => setTimeout(() => reject(new Error(`${topic}: only ${got.join(',')}`)), 15_000))]);
  await consumer.disconnect();
  return got;
}

const seen = (got: IPublishPacket[]) => got.map((p) => `${p.topic}=${p.payload.toString()}`);

describe('e2e: namespaces isolate tenants on MQTT and Kafka', () => {
  let dir = '';
  let broker: Broker;
  let mqttUrl = '';
  let kafkaAddr = '';
  const clients: MqttClient[] = [];

  async function start(): Promise<void> {
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'mqtt,kafka',
      'mqtt-port': '0',
      'mqtt-ws-port': '0', // never the default 8083: another test's broker may hold it
      'kafka-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'kafka-group-initial-rebalance-delay': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: process.env.NSLOG ?? 'silent' }));
    mqttUrl = `mqtt://127.0.0.1:${broker.listeners.get('mqtt')!.address().port}`;
    kafkaAddr = `127.0.0.1:${broker.listeners.get('kafka')!.address().port}`;
  }

  async function connect(user: User, opts: mqtt.IClientOptions = {}): Promise<MqttClient> {
    return (await connectAck(user, opts)).client;
  }

  /** Connects and answers the CONNACK too (Session Present). */
  function connectAck(user: User, opts: mqtt.IClientOptions = {}): Promise<{ client: MqttClient; present: boolean }> {
    return new Promise((resolve, reject) => {
      const c = mqtt.connect(mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: user, password: `${user}-pw`, ...opts });
      clients.push(c);
      c.once('connect', (ack) => resolve({ client: c, present: ack.sessionPresent }));
      c.once('error', reject);
    });
  }

  function kafka(user: User): KafkaClient {
    return new Kafka({
      clientId: `ns-${user}`,
      brokers: [kafkaAddr],
      sasl: { mechanism: 'plain', username: user, password: `${user}-pw` },
      logLevel: logLevel.NOTHING,
      retry: { retries: 2 },
      connectionTimeout: 5000,
    });
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-'));
    // The previous version's world: every user in `default`.
    writeFileSync(join(dir, 'users.yaml'), ['users:', '  - {username: dee, password: dee-pw}', ''].join('\n'));
    await start();
    // Data written before namespaces: a retained message, a stream with a record, a persistent session.
    const old = await connect('dee', { clientId: 'c1', clean: false, properties: { sessionExpiryInterval: 600 } });
    await old.subscribeAsync('orders/#', { qos: 1 });
    await old.publishAsync('state/x', 'old', { qos: 1, retain: true });
    await old.endAsync();
    const p = kafka('dee').producer();
    await p.connect();
    await p.send({ topic: 'orders', messages: [{ value: 'old-record' }] });
    await p.disconnect();
    await broker.close();
    // This version: namespaces t1 and t2 with a user each, next to dee.
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: dee, password: dee-pw}',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        'namespaces:',
        '  - {name: t1}',
        '  - {name: t2}',
        '',
      ].join('\n'),
    );
    await start();
  });

  after(async () => {
    for (const c of clients) c.end(true);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("data written before namespaces is default's: its session, retained message and stream", async () => {
    const c = await connect('dee', { clientId: 'c1', clean: false, properties: { sessionExpiryInterval: 600 } });
    const got = collect(c);
    // The stored session was resumed (its subscription is there: a publish on orders/ reaches it).
    await c.publishAsync('orders/resumed', 'r', { qos: 1 });
    await until(() => assert.deepEqual(seen(got), ['orders/resumed=r']));
    const r = await connect('dee');
    const rgot = collect(r);
    await r.subscribeAsync('state/x', { qos: 1 });
    await until(() => assert.deepEqual(seen(rgot), ['state/x=old']));
    // t1 and t2 see neither the retained message nor the session.
    for (const u of ['ann', 'bob'] as const) {
      const t = await connect(u);
      const tgot = collect(t);
      await t.subscribeAsync('state/x', { qos: 1 });
      await t.publishAsync('state/marker', 'm', { qos: 1 });
      await t.subscribeAsync('state/marker', { qos: 1 });
      await t.publishAsync('state/marker', 'm2', { qos: 1 });
      await until(() => assert.ok(seen(tgot).includes('state/marker=m2')));
      assert.ok(!seen(tgot).some((s) => s.startsWith('state/x')), `${u} saw default's retained message`);
      await t.endAsync();
      // The same client id in another namespace is another session: not present there, and default's stays.
      const s = await connectAck(u, { clientId: 'c1', clean: false, properties: { sessionExpiryInterval: 60 } });
      assert.equal(s.present, false);
      assert.equal(c.connected, true, 'default c1 was not taken over');
      await s.client.endAsync();
    }
    await c.endAsync();
    await r.endAsync();
    // The Kafka topic `orders` written before is default's: its record is there for dee, and not for the tenants.
    assert.deepEqual(await consumeAll(kafka('dee'), 'orders', 'g-old'), ['old-record']);
    const admin = kafka('ann').admin();
    await admin.connect();
    assert.ok(!(await admin.listTopics()).includes('orders'), "t1 does not see default's orders");
    await admin.disconnect();
  });

  test('MQTT: the same topics, retained message and shared group in three namespaces; each sees only its own', async () => {
    const subs = new Map<User, IPublishPacket[]>();
    const pubs = new Map<User, MqttClient>();
    for (const u of TENANTS) {
      const s = await connect(u, { clientId: `sub-${u}` });
      subs.set(u, collect(s));
      // `#` too: a first-level wildcard of one namespace reaches no other namespace's topics.
      await s.subscribeAsync(['orders/#', '#', '$share/g/orders/#'], { qos: 1 });
      pubs.set(u, await connect(u, { clientId: 'c1' }));
    }
    for (const u of TENANTS) {
      await pubs.get(u)!.publishAsync('orders/new', `from-${u}`, { qos: 1, properties: { responseTopic: `reply/${u}` } });
      await pubs.get(u)!.publishAsync('state/x', `retained-${u}`, { qos: 1, retain: true });
    }
    for (const u of TENANTS) await pubs.get(u)!.publishAsync('marker', 'end', { qos: 1 });
    for (const u of TENANTS) {
      const got = subs.get(u)!;
      await until(() => assert.ok(seen(got).includes('marker=end'), `${u}: ${seen(got).join(', ')}`));
      // orders/new once (one PUBLISH for the session's overlapping subscriptions), state/x and the marker through
      // `#`: all its own (and default's retained state/x of before namespaces, sent at the subscribe).
      const want = [`orders/new=from-${u}`, `state/x=retained-${u}`, 'marker=end', ...(u === 'dee' ? ['state/x=old'] : [])];
      assert.deepEqual(seen(got).sort(), want.sort());
      // The v5 Response Topic went in qualified and comes out as the publisher wrote it.
      assert.equal(got.find((p) => p.topic === 'orders/new')?.properties?.responseTopic, `reply/${u}`);
    }
    // Retained `state/x` for a new subscriber: its own namespace's value only.
    for (const u of TENANTS) {
      const r = await connect(u);
      const got = collect(r);
      await r.subscribeAsync('state/x', { qos: 1 });
      await until(() => assert.deepEqual(seen(got), [`state/x=retained-${u}`]));
      await r.endAsync();
    }
  });

  test('MQTT: a will goes to its own namespace', async () => {
    const watch = new Map<User, IPublishPacket[]>();
    for (const u of TENANTS) {
      const w = await connect(u);
      watch.set(u, collect(w));
      await w.subscribeAsync('will/+', { qos: 1 });
    }
    const dying = await connect('ann', { clientId: 'dying', will: { topic: 'will/ann', payload: Buffer.from('gone'), qos: 1, retain: false } });
    (dying as unknown as { stream: { destroy(): void } }).stream.destroy();
    await until(() => assert.deepEqual(seen(watch.get('ann')!), ['will/ann=gone']));
    for (const u of ['dee', 'bob'] as const) {
      const p = await connect(u);
      await p.publishAsync('will/marker', 'm', { qos: 1 });
      await until(() => assert.deepEqual(seen(watch.get(u)!), ['will/marker=m']));
      await p.endAsync();
    }
  });

  test('MQTT: spelling the reserved $ns/ space is refused (publish 0x87, subscribe 0x87, client id 0x85, mosquitto 3.1.1)', async () => {
    const watch = await connect('ann');
    const got = collect(watch);
    await watch.subscribeAsync('orders/#', { qos: 1 });
    for (const u of TENANTS) {
      const c = await connect(u);
      // MQTT.js fails the publish with the PUBACK's reason code.
      await assert.rejects(c.publishAsync('$ns/t1/orders/evil', `evil-${u}`, { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
      await assert.rejects(c.subscribeAsync('$ns/t1/#', { qos: 1 }), /Not authorized/);
      await assert.rejects(c.subscribeAsync('$share/g/$ns/t1/#', { qos: 1 }), /Not authorized/);
      await c.endAsync();
      await assert.rejects(connect(u, { clientId: '$ns/t1/c1' }), (err: { code?: number }) => err.code === 0x85);
    }
    // MQTT 3.1.1 (mosquitto_pub): acknowledged and dropped, as a denied publish.
    const port = mqttUrl.split(':').pop()!;
    const r = await run('mosquitto_pub', ['-V', 'mqttv311', '-p', port, '-u', 'dee', '-P', 'dee-pw', '-t', '$ns/t1/orders/evil', '-m', 'evil-311', '-q', '1']);
    assert.equal(r.code, 0, r.stderr);
    const ann = await connect('ann');
    await ann.publishAsync('orders/marker', 'm', { qos: 1 });
    await until(() => assert.deepEqual(seen(got), ['orders/marker=m']));
    await ann.endAsync();
  });

  test("Kafka: the same topic and group in three namespaces; Metadata, ListGroups and kcat -L list only the tenant's own names", async () => {
    for (const u of TENANTS) {
      const admin = kafka(u).admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic: 'sensors', numPartitions: 1 }] });
      await admin.disconnect();
      const p = kafka(u).producer();
      await p.connect();
      await p.send({ topic: 'orders', messages: [{ value: `k-${u}` }] });
      await p.disconnect();
    }
    // MQTT -> Kafka inside t1: a publish on `sensors` is captured by t1's topic `sensors` only.
    const m = await connect('ann');
    await m.publishAsync('sensors', 'mqtt-ann', { qos: 1 });
    await m.endAsync();
    for (const u of TENANTS) {
      const p = kafka(u).producer();
      await p.connect();
      await p.send({ topic: 'sensors', messages: [{ value: 'end' }] });
      await p.send({ topic: 'orders', messages: [{ value: 'end' }] });
      await p.disconnect();
    }
    const results = await Promise.all(
      TENANTS.map(async (u) => ({
        u,
        orders: await consumeAll(kafka(u), 'orders', 'g', 0, 'end'),
        sensors: await consumeAll(kafka(u), 'sensors', 'g2', 0, 'end'),
      })),
    );
    for (const r of results) {
      assert.deepEqual(r.orders, r.u === 'dee' ? ['old-record', 'k-dee'] : [`k-${r.u}`], r.u);
      assert.deepEqual(r.sensors, r.u === 'ann' ? ['mqtt-ann'] : [], r.u);
    }
    for (const u of TENANTS) {
      const admin = kafka(u).admin();
      await admin.connect();
      const topics = (await admin.listTopics()).filter((t) => !t.startsWith('__')).sort();
      assert.deepEqual(
        topics.filter((t) => t === 'orders' || t === 'sensors'),
        ['orders', 'sensors'],
        u,
      );
      assert.ok(!topics.some((t) => t.includes('~')), `${u}: ${topics.join(',')}`);
      const groups = (await admin.listGroups()).groups.map((g) => g.groupId).sort();
      assert.deepEqual(groups, u === 'dee' ? ['g', 'g-old', 'g2'] : ['g', 'g2'], u);
      const [g] = (await admin.describeGroups(['g'])).groups;
      assert.equal(g.groupId, 'g');
      const offsets = await admin.fetchOffsets({ groupId: 'g', topics: ['orders'] });
      assert.equal(offsets[0].topic, 'orders');
      assert.equal(offsets[0].partitions[0].offset, u === 'dee' ? '3' : '2', u);
      await admin.disconnect();
    }
    // kcat -L (librdkafka's Metadata of every topic) as ann: t1's names, as t1 writes them.
    const r = await run('kcat', [
      '-b',
      kafkaAddr,
      '-L',
      '-J',
      '-X',
      'security.protocol=SASL_PLAINTEXT',
      '-X',
      'sasl.mechanisms=PLAIN',
      '-X',
      'sasl.username=ann',
      '-X',
      'sasl.password=ann-pw',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const listed = (JSON.parse(r.stdout) as { topics: Array<{ topic: string }> }).topics.map((t) => t.topic).sort();
    assert.deepEqual(listed, ['orders', 'sensors']);
  });

  test('Kafka: spelling an internal name is refused (INVALID_TOPIC_EXCEPTION), a spelled-out group id stays apart', async () => {
    for (const u of TENANTS) {
      const p = kafka(u).producer();
      await p.connect();
      await assert.rejects(p.send({ topic: 't1~orders', messages: [{ value: `evil-${u}` }] }), /INVALID_TOPIC|not valid|Invalid topic/i, u);
      await p.disconnect();
    }
    const admin = kafka('dee').admin();
    await admin.connect();
    const offsets = await admin.fetchOffsets({ groupId: '$ns/t1/g', topics: ['orders'] });
    assert.equal(offsets[0].partitions[0].offset, '-1', "default reaches no offsets of t1's group g");
    await admin.disconnect();
    // t1's orders still holds only its own record and marker.
    assert.deepEqual(await consumeAll(kafka('ann'), 'orders', 'g-check', 2), ['k-ann', 'end']);
  });

  test('with no policy at all (auto), a tenant does not administer the broker: admin API 403, Kafka broker configs refused', async () => {
    const httpPort = broker.admin.address().port;
    const get = (u: User, path: string) =>
      fetch(`http://127.0.0.1:${httpPort}${path}`, { headers: { authorization: `Basic ${Buffer.from(`${u}:${u}-pw`).toString('base64')}` } });
    // dee (default) keeps the zero-setup behaviour: everything is allowed while no policy exists.
    assert.equal((await get('dee', '/api/v1/users')).status, 200);
    for (const u of ['ann', 'bob'] as const) {
      for (const path of ['/api/v1/users', '/api/v1/policies', '/api/v1/namespaces']) assert.equal((await get(u, path)).status, 403, `${u} ${path}`);
      const admin = kafka(u).admin();
      await admin.connect();
      // The broker's configs are the broker's (describe and alter cluster:*).
      await assert.rejects(
        admin.describeConfigs({ resources: [{ type: 4, name: '0' }], includeSynonyms: false }),
        (e: { type?: string }) => e.type === 'CLUSTER_AUTHORIZATION_FAILED',
        `${u}: DescribeConfigs of the broker`,
      );
      await assert.rejects(
        admin.alterConfigs({ validateOnly: false, resources: [{ type: 4, name: '0', configEntries: [{ name: 'log.retention.ms', value: '1000' }] }] }),
        (e: { type?: string }) => e.type === 'CLUSTER_AUTHORIZATION_FAILED',
        `${u}: AlterConfigs of the broker`,
      );
      // Its own topics stay open: it creates one and lists it.
      await admin.createTopics({ topics: [{ topic: `own-${u}`, numPartitions: 1 }] });
      assert.ok((await admin.listTopics()).includes(`own-${u}`));
      await admin.deleteTopics({ topics: [`own-${u}`] });
      await admin.disconnect();
    }
    const admin = kafka('dee').admin();
    await admin.connect();
    const acls = await admin.describeAcls({ resourceType: 1, permissionType: 1, operation: 1, resourcePatternType: 1 });
    assert.deepEqual(acls.resources, [], 'no policy, no ACL');
    const configs = await admin.describeConfigs({ resources: [{ type: 4, name: '0' }], includeSynonyms: false });
    assert.equal(configs.resources[0].errorCode, 0);
    await admin.disconnect();
  });

  test("policies name the tenant's own names, and a deny holds on MQTT and on a Kafka topic fed by the denied topic", async () => {
    const d = broker.access.directory;
    await d.putPolicy({ name: 'ns-all', effect: 'allow', actions: ['*'], resources: ['*:*'], principals: ['everyone'] });
    await d.putPolicy({ name: 'ns-vault', effect: 'deny', actions: ['subscribe'], resources: ['topic:vault/#'], principals: ['user:ann'] });
    // t1's topic `vault` (made here: ann may not make a topic capturing what she may not read).
    await broker.engine.createStream({ name: 't1~vault', partitions: 1, namespaced: true });
    const c = await connect('ann');
    await assert.rejects(c.subscribeAsync('vault/x', { qos: 1 }), /Not authorized/);
    await c.subscribeAsync('open/x', { qos: 1 });
    await c.endAsync();
    const consumer = kafka('ann').consumer({ groupId: 'g-vault', maxWaitTimeInMs: 100, retry: { retries: 0 } });
    const crashed = new Promise<string>((resolve) =>
      consumer.on(consumer.events.CRASH, (e) => resolve(String((e.payload.error as { type?: string }).type ?? e.payload.error))),
    );
    await consumer.connect();
    await consumer.subscribe({ topic: 'vault', fromBeginning: true });
    await consumer.run({ eachMessage: async () => undefined });
    assert.match(await crashed, /Not authorized to access topics/);
    await consumer.disconnect();
    // Under the same policies ann reads t1's orders (not fed by vault/#).
    assert.deepEqual(await consumeAll(kafka('ann'), 'orders', 'g-open', 1), ['k-ann']);
    // bob (t2) is not named by the deny: t2's vault/x is his to read.
    const b = await connect('bob');
    await b.subscribeAsync('vault/x', { qos: 1 });
    await b.endAsync();
  });
  test('storage quota: over maxStorageBytes KafkaJS gets POLICY_VIOLATION and MQTT v5 0x97; deleting a topic lets writes resume', async () => {
    const d = broker.access.directory;
    const q = broker.access.quotas;
    const before = q.storedBytes().get('t2');
    const used = before === undefined ? 0 : before.hot + before.objects;
    // Room for a few kilobytes more than t2 holds now; t1 (same broker) is not limited.
    await d.putNamespace({ name: 't2', quotas: { maxStorageBytes: used + 4000 } });
    const k = kafka('bob');
    const p = k.producer({ retry: { retries: 0 } });
    await p.connect();
    const value = 'x'.repeat(1000);
    let refused: Error | null = null;
    let sent = 0;
    const deadline = Date.now() + 10_000;
    while (refused === null && Date.now() < deadline) {
      try {
        await p.send({ topic: 'big', messages: [{ value }] });
        sent++;
      } catch (err) {
        refused = err as Error;
      }
    }
    assert.ok(refused !== null, `never refused after ${sent} records`);
    assert.match(`${refused.message} ${(refused as { type?: string }).type ?? ''}`, /POLICY_VIOLATION|storage quota/i);
    assert.ok(sent >= 3, `${sent} records went in before the quota was reached`);
    const stored = q.storedBytes().get('t2')!;
    assert.ok(stored.hot + stored.objects >= used + 4000, 'refused only once over the quota');
    // MQTT v5 in the same namespace: PUBACK 0x97 Quota exceeded, the connection stays.
    const c = await connect('bob');
    await assert.rejects(c.publishAsync('orders/full', 'm', { qos: 1 }), (err: { code?: number }) => err.code === 0x97);
    assert.ok(c.connected);
    // Another namespace still writes.
    const pa = kafka('ann').producer();
    await pa.connect();
    await pa.send({ topic: 'orders', messages: [{ value: 'ann-still' }] });
    await pa.disconnect();
    // Nothing stored was lost: every accepted record reads back.
    const got = await consumeAll(k, 'big', 'g-big', sent);
    assert.equal(got.length, sent);
    // Deleting the topic frees the room: writes resume (the figure is re-read at most a second later).
    const admin = k.admin();
    await admin.connect();
    await admin.deleteTopics({ topics: ['big'] });
    await admin.disconnect();
    await until(() => {
      const s = q.storedBytes().get('t2');
      assert.ok(s === undefined || s.hot + s.objects < used + 4000);
    });
    await p.send({ topic: 'again', messages: [{ value: 'after' }] });
    await c.publishAsync('orders/ok', 'm', { qos: 1 });
    await c.endAsync();
    await p.disconnect();
    assert.ok((q.figures().t2?.refusedWrites ?? 0) >= 2);
  });
});
