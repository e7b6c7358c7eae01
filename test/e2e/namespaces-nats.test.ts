/**
 * Namespaces as tenants on NATS (issue 29): a NATS client's account is its user's namespace, with the real `nats`
 * client and MQTT.js. One broker in this process, three namespaces in use: `default` (user dee), `t1` (ann) and
 * `t2` (bob). Each runs the same names (subject `orders.new`, stream `orders`, durable consumer `c1`, KV bucket
 * `cfg`, object store `files`) and sees exactly its own messages, streams, infos, consumers, keys and objects; a t1
 * MQTT publish reaches t1's NATS subscriber and t1's stream only; a KV watch sees its own bucket; a stream a policy
 * denies stays denied; a client spelling another namespace's internal stream name (`t2~orders`) finds nothing; after
 * a restart every namespace has its streams, consumers and ack floors back. Absence is proven by a marker sent after.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import { AckPolicy, connect, StringCodec, type NatsConnection, type Subscription } from 'nats';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

const USERS = { dee: 'default', ann: 't1', bob: 't2' } as const;
type User = keyof typeof USERS;
const ALL = Object.keys(USERS) as User[];
const sc = StringCodec();

/** Reads a subscription until `marker`; answers what came before it. */
async function untilMarker(sub: Subscription, marker: string): Promise<string[]> {
  const got: string[] = [];
  const timer = setTimeout(() => sub.unsubscribe(), 10_000);
  for await (const m of sub) {
    const v = `${m.subject}=${sc.decode(m.data)}`;
    if (sc.decode(m.data) === marker) break;
    got.push(v);
  }
  clearTimeout(timer);
  return got;
}

describe('e2e: namespaces isolate tenants on NATS and JetStream', () => {
  let dir = '';
  let broker: Broker;
  let natsUrl = '';
  let mqttUrl = '';
  const nc = {} as Record<User, NatsConnection>;
  const mq: MqttClient[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-nsnats-'));
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
        'policies:',
        '  - {name: ann-no-secret, effect: deny, actions: [create, describe, subscribe], resources: ["stream:secret"], principals: ["user:ann"]}',
        '',
      ].join('\n'),
    );
    await start();
  });

  async function start(): Promise<void> {
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'mqtt,nats',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'nats-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'default-policy': 'allow',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    natsUrl = `nats://127.0.0.1:${broker.listeners.get('nats')!.address().port}`;
    mqttUrl = `mqtt://127.0.0.1:${broker.listeners.get('mqtt')!.address().port}`;
    for (const u of ALL) nc[u] = await connect({ servers: natsUrl, user: u, pass: `${u}-pw` });
  }

  after(async () => {
    for (const u of ALL) await nc[u]?.close();
    for (const c of mq) await c.endAsync();
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function mqttOf(u: User): Promise<MqttClient> {
    const c = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: u, password: `${u}-pw` });
    mq.push(c);
    return c;
  }

  test('core NATS: the same subject in three namespaces, each subscriber gets its own namespace only', async () => {
    const subs = Object.fromEntries(ALL.map((u) => [u, nc[u].subscribe('orders.>')])) as Record<User, Subscription>;
    const wild = Object.fromEntries(ALL.map((u) => [u, nc[u].subscribe('>')])) as Record<User, Subscription>;
    for (const u of ALL) await nc[u].flush();
    for (const u of ALL) nc[u].publish('orders.new', sc.encode(`from-${u}`));
    for (const u of ALL) nc[u].publish('orders.new', sc.encode('end'));
    for (const u of ALL) assert.deepEqual(await untilMarker(subs[u], 'end'), [`orders.new=from-${u}`], u);
    // `>` of a tenant is all of its subjects and nothing of another's (nor default's `>` a tenant's).
    for (const u of ALL) assert.deepEqual(await untilMarker(wild[u], 'end'), [`orders.new=from-${u}`], `${u} >`);
    for (const u of ALL) wild[u].unsubscribe();
  });

  test('request/reply stays in the namespace: a t1 request is answered by t1, reaches no t2 responder', async () => {
    const t2 = nc.bob.subscribe('svc.echo');
    nc.ann.subscribe('svc.echo', { callback: (_e, m) => m.respond(sc.encode(`t1:${sc.decode(m.data)}`)) });
    await nc.ann.flush();
    await nc.bob.flush();
    const r = await nc.ann.request('svc.echo', sc.encode('hi'), { timeout: 2000 });
    assert.equal(sc.decode(r.data), 't1:hi');
    nc.bob.publish('svc.echo', sc.encode('end'));
    assert.deepEqual(await untilMarker(t2, 'end'), []);
  });

  test("an MQTT publish of t1 reaches t1's NATS subscriber, not t2's nor default's", async () => {
    const subs = Object.fromEntries(ALL.map((u) => [u, nc[u].subscribe('sensors.*')])) as Record<User, Subscription>;
    for (const u of ALL) await nc[u].flush();
    const annMqtt = await mqttOf('ann');
    await annMqtt.publishAsync('sensors/t', 'mqtt-t1', { qos: 1 });
    await annMqtt.publishAsync('sensors/t', 'end', { qos: 1 });
    assert.deepEqual(await untilMarker(subs.ann, 'end'), ['sensors.t=mqtt-t1']);
    // The others' markers, each in its own namespace, after the t1 message was delivered.
    for (const u of ['bob', 'dee'] as const) {
      const c = await mqttOf(u);
      await c.publishAsync('sensors/t', 'end', { qos: 1 });
      assert.deepEqual(await untilMarker(subs[u], 'end'), [], u);
    }
  });

  test('JetStream: the same stream, consumer, messages in three namespaces; each sees its own', async () => {
    for (const u of ALL) {
      const jsm = await nc[u].jetstreamManager();
      const si = await jsm.streams.add({ name: 'orders', subjects: ['orders.>'] });
      assert.equal(si.config.name, 'orders');
      assert.deepEqual(si.config.subjects, ['orders.>']);
      const js = nc[u].jetstream();
      for (let i = 0; i < (u === 'ann' ? 2 : u === 'bob' ? 3 : 1); i++) {
        const ack = await js.publish(`orders.${u}`, sc.encode(`${u}-${i}`));
        assert.equal(ack.stream, 'orders');
        assert.equal(ack.seq, i + 1);
      }
      await jsm.consumers.add('orders', { durable_name: 'c1', ack_policy: AckPolicy.Explicit });
    }
    for (const u of ALL) {
      const jsm = await nc[u].jetstreamManager();
      const names: string[] = [];
      for await (const n of jsm.streams.names()) names.push(n);
      assert.deepEqual(names, ['orders'], `${u} names`);
      const list = await jsm.streams.list().next();
      assert.deepEqual(
        list.map((s) => [s.config.name, s.config.subjects, s.state.messages]),
        [['orders', ['orders.>'], u === 'ann' ? 2 : u === 'bob' ? 3 : 1]],
        `${u} list`,
      );
      const info = await jsm.streams.info('orders', { subjects_filter: '>' });
      assert.deepEqual(info.state.subjects, { [`orders.${u}`]: info.state.messages }, `${u} info subjects`);
      const last = await jsm.streams.getMessage('orders', { last_by_subj: `orders.${u}` });
      assert.equal(last.subject, `orders.${u}`);
      // The consumer of each namespace delivers that namespace's messages, under their own subjects, and acks.
      const c = await nc[u].jetstream().consumers.get('orders', 'c1');
      const got: string[] = [];
      const it = await c.fetch({ max_messages: 10, expires: 1000 });
      for await (const m of it) {
        got.push(`${m.subject}=${sc.decode(m.data)}`);
        assert.match(m.info.stream, /^orders$/);
        await m.ackAck();
      }
      const want = Array.from({ length: u === 'ann' ? 2 : u === 'bob' ? 3 : 1 }, (_, i) => `orders.${u}=${u}-${i}`);
      assert.deepEqual(got, want, `${u} consumer`);
      const ci = await jsm.consumers.info('orders', 'c1');
      assert.deepEqual([ci.stream_name, ci.num_ack_pending, ci.delivered.stream_seq, ci.ack_floor.stream_seq], ['orders', 0, want.length, want.length]);
      const consumers: string[] = [];
      for await (const ci2 of jsm.consumers.list('orders')) consumers.push(ci2.name);
      assert.deepEqual(consumers, ['c1']);
    }
    // The internal name of another namespace's stream is nobody's to name.
    await assert.rejects((await nc.ann.jetstreamManager()).streams.info('t2~orders'), /stream not found/);
    await assert.rejects((await nc.dee.jetstreamManager()).streams.info('t1~orders'), /stream not found/);
  });

  test('KV buckets and object stores of the same names are per namespace', async () => {
    for (const u of ALL) {
      const kv = await nc[u].jetstream().views.kv('cfg');
      await kv.put('mode', sc.encode(`mode-${u}`));
      await kv.put(`only.${u}`, sc.encode('x'));
    }
    for (const u of ALL) {
      const kv = await nc[u].jetstream().views.kv('cfg');
      const e = await kv.get('mode');
      assert.equal(sc.decode(e!.value), `mode-${u}`);
      assert.equal(e!.revision, 1);
      const keys: string[] = [];
      for await (const k of await kv.keys()) keys.push(k);
      assert.deepEqual(keys.sort(), ['mode', `only.${u}`].sort(), `${u} keys`);
      const status = await kv.status();
      assert.equal(status.values, 2);
    }
    for (const u of ALL) {
      const os = await nc[u].jetstream().views.os('files');
      await os.putBlob({ name: 'a.txt' }, sc.encode(`file-of-${u}`));
    }
    for (const u of ALL) {
      const os = await nc[u].jetstream().views.os('files');
      assert.equal(sc.decode((await os.getBlob('a.txt'))!), `file-of-${u}`);
      const jsm = await nc[u].jetstreamManager();
      const names: string[] = [];
      for await (const n of jsm.streams.names()) names.push(n);
      assert.deepEqual(names.sort(), ['KV_cfg', 'OBJ_files', 'orders'], `${u} streams`);
      const ai = await jsm.getAccountInfo();
      assert.equal(ai.streams, 3, `${u} account streams`);
    }
  });

  test('a stream a policy denies stays denied in the namespace', async () => {
    const jsm = await nc.ann.jetstreamManager();
    await assert.rejects(jsm.streams.add({ name: 'secret', subjects: ['secret.>'] }), /permissions violation for create on stream "secret"/i);
    // bob (t2) has no such policy: its `secret` is its own.
    const bjsm = await nc.bob.jetstreamManager();
    assert.equal((await bjsm.streams.add({ name: 'secret', subjects: ['secret.>'] })).config.name, 'secret');
    await assert.rejects(jsm.streams.info('secret'), /permissions violation for describe on stream "secret"/i);
  });

  test("an MQTT publish of t1 is stored by t1's JetStream stream only; a KV watch sees its own bucket", async () => {
    const annMqtt = await mqttOf('ann');
    await annMqtt.publishAsync('orders/mqtt', 'via-mqtt', { qos: 1 });
    const msgs = Object.fromEntries(
      await Promise.all(ALL.map(async (u) => [u, (await (await nc[u].jetstreamManager()).streams.info('orders')).state.messages])),
    ) as Record<User, number>;
    assert.deepEqual(msgs, { dee: 1, ann: 3, bob: 3 });
    const m = await (await nc.ann.jetstreamManager()).streams.getMessage('orders', { last_by_subj: 'orders.mqtt' });
    assert.equal(sc.decode(m.data), 'via-mqtt');
    await assert.rejects((await nc.bob.jetstreamManager()).streams.getMessage('orders', { last_by_subj: 'orders.mqtt' }), /no message found/);
    // A watch (an ordered push consumer on the bucket's subjects) of t2 sees t2's values, then t2's new one.
    const kv = await nc.bob.jetstream().views.kv('cfg');
    const w = await kv.watch({ key: 'mode' });
    const seen: string[] = [];
    await (await nc.ann.jetstream().views.kv('cfg')).put('mode', sc.encode('t1-later'));
    await kv.put('mode', sc.encode('t2-later'));
    for await (const e of w) {
      seen.push(sc.decode(e.value));
      if (seen.length === 2) break;
    }
    assert.deepEqual(seen, ['mode-bob', 't2-later']);
  });

  test('after a restart every namespace has its own streams, consumers and acks back', async () => {
    for (const u of ALL) await nc[u].close();
    await broker.close();
    await start();
    for (const u of ALL) {
      const jsm = await nc[u].jetstreamManager();
      const names: string[] = [];
      for await (const n of jsm.streams.names()) names.push(n);
      assert.deepEqual(names.sort(), u === 'bob' ? ['KV_cfg', 'OBJ_files', 'orders', 'secret'] : ['KV_cfg', 'OBJ_files', 'orders'], `${u} streams`);
      const ci = await jsm.consumers.info('orders', 'c1');
      const acked = u === 'ann' ? 2 : u === 'bob' ? 3 : 1;
      assert.deepEqual([ci.stream_name, ci.ack_floor.stream_seq, ci.num_pending], ['orders', acked, u === 'ann' ? 1 : 0], u);
      assert.equal(
        sc.decode((await (await nc[u].jetstream().views.kv('cfg')).get('mode'))!.value),
        u === 'dee' ? 'mode-dee' : `${u === 'ann' ? 't1' : 't2'}-later`,
      );
    }
  });
});
