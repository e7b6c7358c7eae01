/**
 * The MQTT adapter against real clients: MQTT.js (protocol 3.1.1), mosquitto_pub / mosquitto_sub, and a raw
 * socket client for malformed input. Every test cleans up its clients; each suite closes its broker.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Duplex } from 'node:stream';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { pino } from 'pino';
import { Engine, decodeBatch, makeMessage, recordToMessage, type Message, type Subscriber, type Subscription } from '../../../src/core/index.js';
import { MQTT_DEFAULTS, MqttConnection, resolveMqttOptions } from '../../../src/protocols/mqtt/index.js';
import { encodePacket, encodePublishFrame, type MqttPacket } from '../../../src/protocols/mqtt/codec/index.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { GatedStreams, RawClient, run, sleep, startBroker, until, type TestBroker } from './helpers.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

interface Got {
  topic: string;
  payload: string;
  qos: number;
  retain: boolean;
}

function client(b: TestBroker, opts: IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(b.url, { protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 3000, ...opts });
}

function collect(c: MqttClient): Got[] {
  const got: Got[] = [];
  c.on('message', (topic, payload, packet) => got.push({ topic, payload: payload.toString(), qos: packet.qos, retain: packet.retain }));
  return got;
}

function closedEvent(c: MqttClient): Promise<void> {
  return new Promise((resolve) => c.once('close', () => resolve()));
}

const PROTOCOL_ERROR_LINE = 'mqtt protocol error, closing connection';

describe('mqtt adapter with MQTT.js', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker();
  });
  after(() => b.close());

  test('subscribe with + and #, receive QoS 0 and QoS 1, RETAIN cleared on live delivery', async () => {
    const sub = await client(b, { clientId: 'sub-wild' });
    const pub = await client(b, { clientId: 'pub-wild' });
    try {
      const got = collect(sub);
      const grants = await sub.subscribeAsync({ 'home/+/temp': { qos: 1 }, 'home/#': { qos: 0 } });
      assert.deepEqual(
        grants.map((g) => [g.topic, g.qos]),
        [
          ['home/+/temp', 1],
          ['home/#', 0],
        ],
      );
      await pub.publishAsync('home/kitchen/temp', '21', { qos: 1 });
      await pub.publishAsync('home/kitchen/light', 'on', { qos: 0 });
      await pub.publishAsync('home/hall/temp', 'r', { qos: 0, retain: true });
      await pub.publishAsync('other/x', 'no', { qos: 1 });
      await until(() => got.length >= 3, 'three deliveries');
      await sleep(50);
      // Two filters match home/kitchen/temp: one delivery, at the highest granted QoS [MQTT-3.3.5-1].
      assert.deepEqual(got, [
        { topic: 'home/kitchen/temp', payload: '21', qos: 1, retain: false },
        { topic: 'home/kitchen/light', payload: 'on', qos: 0, retain: false },
        { topic: 'home/hall/temp', payload: 'r', qos: 0, retain: false }, // [MQTT-3.3.1-9]
      ]);
    } finally {
      await Promise.all([sub.endAsync(), pub.endAsync()]);
    }
  });

  test('delivery QoS is min(message QoS, granted QoS)', async () => {
    const sub = await client(b);
    const pub = await client(b);
    try {
      const got = collect(sub);
      await sub.subscribeAsync('mq/zero', { qos: 0 });
      await sub.subscribeAsync('mq/two', { qos: 2 });
      await pub.publishAsync('mq/zero', 'a', { qos: 1 });
      await pub.publishAsync('mq/two', 'b', { qos: 1 });
      await until(() => got.length === 2, 'two deliveries');
      assert.deepEqual(
        got.map((g) => [g.topic, g.qos]),
        [
          ['mq/zero', 0],
          ['mq/two', 1],
        ],
      );
    } finally {
      await Promise.all([sub.endAsync(), pub.endAsync()]);
    }
  });

  test('QoS 2 end to end: publish completes, subscriber receives at QoS 2', async () => {
    const sub = await client(b);
    const pub = await client(b);
    try {
      const got = collect(sub);
      const [g] = await sub.subscribeAsync('q2/#', { qos: 2 });
      assert.equal(g.qos, 2);
      await pub.publishAsync('q2/a', 'exactly-once', { qos: 2 });
      await until(() => got.length === 1, 'delivery');
      assert.deepEqual(got[0], { topic: 'q2/a', payload: 'exactly-once', qos: 2, retain: false });
      // The outbound exchange completed (PUBREC -> PUBREL -> PUBCOMP), freeing the in-flight slot.
      const conn = b.listener.registry.get(sub.options.clientId!) as MqttConnection;
      await until(() => conn.inflightCount === 0, 'outbound QoS 2 to complete');
    } finally {
      await Promise.all([sub.endAsync(), pub.endAsync()]);
    }
  });

  test('unsubscribe stops delivery; subscribing again to a filter replaces it [MQTT-3.8.4-3]', async () => {
    const sub = await client(b);
    const pub = await client(b);
    try {
      const got = collect(sub);
      await sub.subscribeAsync('u/a', { qos: 0 });
      const [g] = await sub.subscribeAsync('u/a', { qos: 1 });
      assert.equal(g.qos, 1);
      await sub.subscribeAsync('u/b', { qos: 0 });
      await pub.publishAsync('u/a', '1', { qos: 1 });
      await until(() => got.length === 1, 'first delivery');
      assert.equal(got[0].qos, 1, 'the replacing subscription (QoS 1) is in force');
      // One UNSUBSCRIBE removes it: had the first subscription survived, u/a would still arrive.
      await sub.unsubscribeAsync('u/a');
      await pub.publishAsync('u/a', '2', { qos: 1 });
      await pub.publishAsync('u/b', 'marker', { qos: 1 });
      await until(() => got.length >= 2, 'marker');
      await sleep(30);
      assert.deepEqual(
        got.map((x) => x.payload),
        ['1', 'marker'],
      );
    } finally {
      await Promise.all([sub.endAsync(), pub.endAsync()]);
    }
  });

  test('shared subscription $share/group/filter spreads messages over its members', async () => {
    const m1 = await client(b);
    const m2 = await client(b);
    const plain = await client(b);
    const pub = await client(b);
    try {
      const g1 = collect(m1);
      const g2 = collect(m2);
      const all = collect(plain);
      await m1.subscribeAsync('$share/workers/jobs/+', { qos: 1 });
      await m2.subscribeAsync('$share/workers/jobs/+', { qos: 1 });
      await plain.subscribeAsync('jobs/+', { qos: 1 });
      for (let i = 0; i < 10; i++) await pub.publishAsync(`jobs/${i}`, String(i), { qos: 1 });
      await until(() => g1.length + g2.length === 10 && all.length === 10, 'all deliveries');
      assert.equal(g1.length, 5);
      assert.equal(g2.length, 5);
      const seen = [...g1, ...g2].map((x) => Number(x.payload)).sort((x, y) => x - y);
      assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    } finally {
      await Promise.all([m1.endAsync(), m2.endAsync(), plain.endAsync(), pub.endAsync()]);
    }
  });

  test('session takeover: the second connection with a client id closes the first and fires its will', async () => {
    const watcher = await client(b);
    const first = await client(b, { clientId: 'same-id', will: { topic: 'wills/same-id', payload: Buffer.from('taken'), qos: 1, retain: false } });
    try {
      const wills = collect(watcher);
      await watcher.subscribeAsync('wills/#', { qos: 1 });
      const firstClosed = closedEvent(first);
      const second = await client(b, { clientId: 'same-id' });
      try {
        await firstClosed; // [MQTT-3.1.4-2]
        await until(() => wills.length === 1, 'will of the first connection');
        assert.deepEqual(wills[0], { topic: 'wills/same-id', payload: 'taken', qos: 1, retain: false });
        const got = collect(second);
        await second.subscribeAsync('takeover/t', { qos: 1 });
        await second.publishAsync('takeover/t', 'still here', { qos: 1 });
        await until(() => got.length === 1, 'second connection works');
        assert.ok(b.listener.registry.get('same-id')?.isConnected);
      } finally {
        await second.endAsync();
      }
    } finally {
      await Promise.all([watcher.endAsync(), first.endAsync(true)]);
    }
  });

  test('will: published when the socket drops, not after DISCONNECT [MQTT-3.14.4-3]', async () => {
    const watcher = await client(b);
    try {
      const got = collect(watcher);
      await watcher.subscribeAsync('wills/#', { qos: 1 });
      const abrupt = await client(b, { will: { topic: 'wills/abrupt', payload: Buffer.from('gone'), qos: 1, retain: false } });
      const polite = await client(b, { will: { topic: 'wills/polite', payload: Buffer.from('never'), qos: 1, retain: false } });
      abrupt.stream.destroy();
      await polite.endAsync(); // sends DISCONNECT
      await until(() => got.length === 1, 'will of the dropped client');
      const marker = await client(b);
      await marker.publishAsync('wills/marker', 'm', { qos: 1 });
      await marker.endAsync();
      await until(() => got.length === 2, 'marker');
      assert.deepEqual(
        got.map((x) => [x.topic, x.payload, x.qos]),
        [
          ['wills/abrupt', 'gone', 1],
          ['wills/marker', 'm', 1],
        ],
      );
      await abrupt.endAsync(true);
    } finally {
      await watcher.endAsync();
    }
  });

  test('keep-alive: pings keep an MQTT.js client connected beyond 1.5 x keep-alive', async () => {
    const c = await client(b, { clientId: 'pinger', keepalive: 1 });
    try {
      await sleep(2200);
      assert.ok(c.connected);
      assert.ok(b.listener.registry.get('pinger')?.isConnected);
    } finally {
      await c.endAsync();
    }
  });

  test('QoS 1 publish to a topic captured by a stream: PUBACK, and the record is in the stream', async () => {
    await b.engine.createStream({ name: 't', partitions: 1, bindings: ['a/#'] });
    const pub = await client(b);
    try {
      await pub.publishAsync('a/b', 'durable', { qos: 1 });
      const batches = await b.engine.read('t', 0, 0, 1 << 20);
      const recs = batches.flatMap((x) => decodeBatch(x));
      assert.equal(recs.length, 1);
      const msg = recordToMessage(recs[0], 't');
      assert.equal(msg.topic, 'a/b');
      assert.equal(msg.payload.toString(), 'durable');
    } finally {
      await pub.endAsync();
    }
  });

  test('bad credentials are refused with CONNACK 0x04 when an authenticator says so', async () => {
    const ab = await startBroker({
      authenticate: (_id, user, pass) => (user === 'alice' && pass?.toString() === 'secret' ? 'ok' : user === 'alice' ? 'bad-credentials' : 'not-authorized'),
    });
    try {
      await assert.rejects(client(ab, { username: 'alice', password: 'wrong' }), (e: Error & { code?: number }) => e.code === 4);
      await assert.rejects(client(ab, { username: 'bob', password: 'x' }), (e: Error & { code?: number }) => e.code === 5);
      const ok = await client(ab, { username: 'alice', password: 'secret' });
      await ok.endAsync();
    } finally {
      await ab.close();
    }
  });

  test('a busy authenticator is CONNACK 0x89 Server busy (5.0) / 0x03 Server unavailable (3.1.1); it is told the client address', async () => {
    const seen: Array<string | undefined> = [];
    const ab = await startBroker({
      authenticate: (_id, _user, _pass, remoteAddress) => {
        seen.push(remoteAddress);
        return 'busy';
      },
    });
    try {
      await assert.rejects(client(ab, { username: 'alice', password: 'x', protocolVersion: 5 }), (e: Error & { code?: number }) => e.code === 0x89);
      await assert.rejects(client(ab, { username: 'alice', password: 'x', protocolVersion: 4 }), (e: Error & { code?: number }) => e.code === 3);
      assert.deepEqual(seen, ['127.0.0.1', '127.0.0.1']);
    } finally {
      await ab.close();
    }
  });

  test('listener close() ends every connection', async () => {
    const lb = await startBroker();
    const c1 = await client(lb);
    const c2 = await client(lb);
    assert.equal(lb.listener.connections(), 2);
    const closed = Promise.all([closedEvent(c1), closedEvent(c2)]);
    await lb.close();
    await closed;
    assert.equal(lb.listener.connections(), 0);
    await Promise.all([c1.endAsync(true), c2.endAsync(true)]);
  });
});

describe('mqtt adapter with mosquitto clients', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker();
  });
  after(() => b.close());

  const common = () => ['-V', 'mqttv311', '-h', '127.0.0.1', '-p', String(b.port)];

  test('mosquitto_sub receives QoS 1 messages from mosquitto_pub', async () => {
    const sub = run('mosquitto_sub', [...common(), '-t', 'mos/#', '-q', '1', '-C', '3', '-W', '10', '-v']);
    await until(() => b.engine.hasLiveSubscribers('mos/a'), 'mosquitto_sub to subscribe');
    const pub = await run('mosquitto_pub', [...common(), '-t', 'mos/a', '-q', '1', '-l'], 'one\ntwo\nthree\n');
    assert.equal(pub.code, 0, pub.stderr);
    const r = await sub;
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.stdout.trim().split('\n'), ['mos/a one', 'mos/a two', 'mos/a three']);
  });

  test('mosquitto_pub to MQTT.js, MQTT.js to mosquitto_sub', async () => {
    const js = await client(b);
    try {
      const got = collect(js);
      await js.subscribeAsync('x/from-mosquitto', { qos: 1 });
      const pub = await run('mosquitto_pub', [...common(), '-t', 'x/from-mosquitto', '-q', '1', '-m', 'hello js']);
      assert.equal(pub.code, 0, pub.stderr);
      await until(() => got.length === 1, 'delivery to MQTT.js');
      assert.deepEqual(got[0], { topic: 'x/from-mosquitto', payload: 'hello js', qos: 1, retain: false });

      const sub = run('mosquitto_sub', [...common(), '-t', 'x/+/to-mosquitto', '-q', '1', '-C', '2', '-W', '10']);
      await until(() => b.engine.hasLiveSubscribers('x/1/to-mosquitto'), 'mosquitto_sub to subscribe');
      await js.publishAsync('x/1/to-mosquitto', 'hello', { qos: 1 });
      await js.publishAsync('x/2/to-mosquitto', 'mosquitto', { qos: 0 });
      const r = await sub;
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(r.stdout.trim().split('\n'), ['hello', 'mosquitto']);
    } finally {
      await js.endAsync();
    }
  });
});

describe('mqtt adapter: raw protocol', () => {
  let b: TestBroker;
  let bystander: MqttClient;
  let byGot: Got[];
  before(async () => {
    // Every malformed input below comes from 127.0.0.1: lift the per-address log limit to see each line.
    b = await startBroker({ logLimit: { perKey: 1000 } });
    bystander = await client(b, { clientId: 'bystander' });
    byGot = collect(bystander);
    await bystander.subscribeAsync('by/#', { qos: 1 });
  });
  after(async () => {
    await bystander.endAsync();
    await b.close();
  });

  /** The bystander's round trip still works: one bad connection never affects another. */
  async function bystanderWorks(): Promise<void> {
    const n = byGot.length;
    await bystander.publishAsync('by/ping', 'ok', { qos: 1 });
    await until(() => byGot.length === n + 1, 'bystander round trip');
  }

  const connect = (id: string) =>
    encodePacket({
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 4,
      cleanSession: true,
      keepalive: 0,
      clientId: id,
      will: null,
      username: null,
      password: null,
    });

  const MALFORMED: Array<{ name: string; bytes: Buffer; id?: string; reason?: RegExp; connectFirst: boolean }> = [
    { name: 'reserved flags on PUBACK', bytes: hex('41 02 0001'), id: '[MQTT-2.2.2-2]', connectFirst: true },
    { name: 'PUBREL with flags 0000', bytes: hex('60 02 0001'), id: '[MQTT-3.6.1-1]', connectFirst: true },
    { name: 'PUBLISH QoS 3', bytes: hex('36 05 0001 61 0001'), id: '[MQTT-3.3.1-4]', connectFirst: true },
    { name: 'wildcard in a PUBLISH topic', bytes: hex('30 06 0004 612f2b2f'), id: '[MQTT-3.3.2-2]', connectFirst: true },
    { name: 'ill-formed UTF-8 in a topic', bytes: hex('30 04 0002 c328'), id: '[MQTT-1.5.3-1]', connectFirst: true },
    { name: 'U+0000 in a topic', bytes: hex('30 05 0003 610062'), id: '[MQTT-1.5.3-2]', connectFirst: true },
    { name: 'SUBSCRIBE without filters', bytes: hex('82 02 0001'), id: '[MQTT-3.8.3-3]', connectFirst: true },
    { name: 'SUBSCRIBE with flags 0000', bytes: hex('80 06 0001 0001 61 00'), id: '[MQTT-3.8.1-1]', connectFirst: true },
    { name: 'a second CONNECT', bytes: connect('again'), id: '[MQTT-3.1.0-2]', connectFirst: true },
    { name: 'a CONNACK sent by a client', bytes: hex('20 02 0000'), id: '[MQTT-4.8.0-1]', connectFirst: true },
    { name: 'garbage bytes', bytes: hex('ff ff ff ff ff ff'), id: '[MQTT-4.8.0-1]', connectFirst: true },
    { name: 'oversized remaining length', bytes: hex('30 ff ff ff 7f'), reason: /exceeds the maximum packet size/, connectFirst: true },
    { name: 'a five-byte remaining length', bytes: hex('30 ff ff ff ff 01'), reason: /longer than four bytes/, connectFirst: true },
    { name: 'a first packet that is not CONNECT', bytes: hex('c0 00'), id: '[MQTT-3.1.0-1]', connectFirst: false },
    { name: 'CONNECT with the reserved flag set', bytes: hex('10 0d 0004 4d515454 04 03 003c 0001 61'), id: '[MQTT-3.1.2-3]', connectFirst: false },
    { name: 'HTTP instead of MQTT', bytes: Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'), connectFirst: false },
  ];

  for (const m of MALFORMED) {
    test(`malformed input closes only that connection, with one log line: ${m.name}`, async () => {
      const before = b.logs.filter((l) => l.msg === PROTOCOL_ERROR_LINE).length;
      const c = m.connectFirst ? await RawClient.connect(b.port, `bad-${m.name}`) : await RawClient.open(b.port);
      c.send(m.bytes);
      await c.waitClosed();
      const lines = b.logs.filter((l) => l.msg === PROTOCOL_ERROR_LINE);
      assert.equal(lines.length, before + 1, 'exactly one protocol-error line');
      const line = lines[lines.length - 1];
      assert.equal(line.level, 40, 'logged at warn');
      assert.equal(typeof line.remote, 'string');
      if (m.id) assert.ok(String(line.err).includes(m.id), `${String(line.err)} should cite ${m.id}`);
      if (m.reason) assert.match(String(line.err), m.reason);
      await bystanderWorks();
    });
  }

  test('unsupported protocol level: CONNACK 0x01, then close [MQTT-3.1.2-2]', async () => {
    const c = await RawClient.open(b.port);
    c.send(hex('10 0d 0004 4d515454 06 02 003c 0001 61'));
    const ack = await c.next('connack');
    assert.deepEqual(ack, { type: 'connack', sessionPresent: false, returnCode: 1 });
    await c.waitClosed();
  });

  test('MQTT 3.1 ("MQIsdp", level 3) clients are accepted', async () => {
    const c = await RawClient.open(b.port);
    c.send({
      type: 'connect',
      protocolName: 'MQIsdp',
      protocolLevel: 3,
      cleanSession: true,
      keepalive: 0,
      clientId: 'old',
      will: null,
      username: null,
      password: null,
    });
    assert.equal((await c.next('connack')).returnCode, 0);
    c.destroy();
  });

  test('empty client id: assigned with clean session, refused with 0x02 without it [MQTT-3.1.3-8]', async () => {
    const ok = await RawClient.open(b.port);
    ok.send({
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 4,
      cleanSession: true,
      keepalive: 0,
      clientId: '',
      will: null,
      username: null,
      password: null,
    });
    assert.equal((await ok.next('connack')).returnCode, 0);
    ok.send({ type: 'pingreq' });
    await ok.next('pingresp'); // [MQTT-3.12.4-1]
    ok.destroy();

    const bad = await RawClient.open(b.port);
    bad.send({
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 4,
      cleanSession: false,
      keepalive: 0,
      clientId: '',
      will: null,
      username: null,
      password: null,
    });
    assert.deepEqual(await bad.next('connack'), { type: 'connack', sessionPresent: false, returnCode: 2 });
    await bad.waitClosed();
  });

  test('invalid filters get 0x80, the others are granted, in order [MQTT-3.8.4-5]', async () => {
    const c = await RawClient.connect(b.port, 'filters');
    c.send({
      type: 'subscribe',
      packetId: 7,
      subscriptions: [
        { filter: 'ok/+', qos: 1 },
        { filter: 'bad/#/x', qos: 1 },
        { filter: 'a+b', qos: 0 },
        { filter: '', qos: 0 },
        { filter: '$share/g', qos: 0 },
        { filter: '$share//x', qos: 0 },
        { filter: '$share/g/ok/#', qos: 2 },
      ],
    });
    assert.deepEqual(await c.next('suback'), { type: 'suback', packetId: 7, returnCodes: [1, 0x80, 0x80, 0x80, 0x80, 0x80, 2] });
    c.send({ type: 'unsubscribe', packetId: 8, filters: ['ok/+', 'never/subscribed'] });
    assert.deepEqual(await c.next('unsuback'), { type: 'unsuback', packetId: 8 }); // [MQTT-3.10.4-5]
    c.destroy();
  });

  test('inbound QoS 2: a re-sent PUBLISH before PUBREL is acknowledged but delivered once', async () => {
    const c = await RawClient.connect(b.port, 'q2-in');
    const n = byGot.length;
    const frame = (dup: boolean) => encodePublishFrame('by/q2', Buffer.from('once'), 2, false, dup, 5);
    c.send(frame(false));
    await c.next('pubrec');
    c.send(frame(true));
    await c.next('pubrec');
    c.send({ type: 'pubrel', packetId: 5 });
    await c.next('pubcomp');
    await bystanderWorks();
    assert.deepEqual(
      byGot.slice(n).map((g) => g.topic),
      ['by/q2', 'by/ping'],
    );
    c.destroy();
  });

  test('outbound QoS 1 and 2 flows with a raw subscriber', async () => {
    const c = await RawClient.connect(b.port, 'raw-sub');
    c.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'rs/#', qos: 2 }] });
    await c.next('suback');
    const conn = b.listener.registry.get('raw-sub') as MqttConnection;
    await bystander.publishAsync('rs/1', 'q1', { qos: 1 });
    const p1 = await c.next('publish');
    assert.equal(p1.qos, 1);
    assert.equal(conn.inflightCount, 1);
    c.send({ type: 'puback', packetId: p1.packetId });
    await until(() => conn.inflightCount === 0, 'PUBACK to free the slot');

    await bystander.publishAsync('rs/2', 'q2', { qos: 2 });
    const p2 = await c.next('publish');
    assert.equal(p2.qos, 2);
    assert.notEqual(p2.packetId, p1.packetId);
    c.send({ type: 'pubrec', packetId: p2.packetId });
    assert.equal((await c.next('pubrel')).packetId, p2.packetId);
    assert.equal(conn.inflightCount, 1);
    c.send({ type: 'pubcomp', packetId: p2.packetId });
    await until(() => conn.inflightCount === 0, 'PUBCOMP to free the slot');
    c.destroy();
  });

  test('keep-alive timeout: a silent client is closed after 1.5 x keep-alive and its will published [MQTT-3.1.2-24]', async () => {
    const n = byGot.length;
    const t0 = Date.now();
    const c = await RawClient.connect(b.port, 'silent', {
      keepalive: 1,
      will: { topic: 'by/will/silent', payload: Buffer.from('timed out'), qos: 1, retain: false },
    });
    await c.waitClosed(4000);
    const elapsed = Date.now() - t0;
    assert.ok(elapsed >= 1400 && elapsed < 2600, `closed after ${elapsed} ms`);
    await until(() => byGot.length > n, 'will');
    assert.deepEqual(byGot[n], { topic: 'by/will/silent', payload: 'timed out', qos: 1, retain: false });
  });

  test('a packet split across many TCP writes is reassembled', async () => {
    const c = await RawClient.connect(b.port, 'splitter');
    const n = byGot.length;
    const payload = Buffer.alloc(200_000, 'z');
    const frame = encodePublishFrame('by/big', payload, 1, false, false, 3);
    for (let off = 0; off < frame.length; off += 8192) {
      c.socket.write(frame.subarray(off, off + 8192));
      await new Promise((r) => setImmediate(r));
    }
    assert.equal((await c.next('puback')).packetId, 3);
    await until(() => byGot.length > n, 'big delivery');
    assert.equal(byGot[n].payload, payload.toString());
    c.destroy();
  });
});

describe('mqtt adapter: options and storage interplay', () => {
  test('options: defaults, and nonsense refused with CONFIG_ERROR', () => {
    const o = resolveMqttOptions({ maxInflight: 5, maxQueued: undefined });
    assert.equal(o.maxInflight, 5);
    assert.equal(o.maxQueued, MQTT_DEFAULTS.maxQueued);
    assert.equal(o.maxPacketSize, 1024 * 1024);
    assert.throws(() => resolveMqttOptions({ maxInflight: 0 }), { code: 'CONFIG_ERROR' });
    assert.throws(() => resolveMqttOptions({ maxPacketSize: 1.5 }), { code: 'CONFIG_ERROR' });
    assert.throws(() => resolveMqttOptions({ maxQos: 3 as 0 }), { code: 'CONFIG_ERROR' });
  });

  test('PUBACKs wait for durable storage and keep arrival order; QoS 2 PUBREC likewise', async () => {
    const gated = new GatedStreams();
    const b = await startBroker({}, gated);
    try {
      await b.engine.createStream({ name: 'slow', partitions: 1, bindings: ['slow/#'] });
      const c = await RawClient.connect(b.port, 'ordered');
      gated.hold = true;
      c.send(encodePublishFrame('slow/1', Buffer.from('a'), 1, false, false, 1));
      c.send(encodePublishFrame('fast/2', Buffer.from('b'), 1, false, false, 2)); // nothing to wait for
      c.send(encodePublishFrame('slow/3', Buffer.from('c'), 1, false, false, 3));
      c.send(encodePublishFrame('fast/4', Buffer.from('d'), 2, false, false, 4));
      await until(() => gated.held === 2, 'two held appends');
      await sleep(50);
      assert.deepEqual(c.packets, [], 'no acknowledgement before the writes are durable');
      gated.release();
      await until(() => c.packets.length === 4, 'four acknowledgements');
      assert.deepEqual(
        c.packets.map((p: MqttPacket) => [p.type, 'packetId' in p ? p.packetId : -1]),
        [
          ['puback', 1],
          ['puback', 2],
          ['puback', 3],
          ['pubrec', 4],
        ],
      );
      c.destroy();
    } finally {
      await b.close();
    }
  });

  test('captured QoS 0 publishes count as pending until stored: a fast QoS 0 publisher is held back too', async () => {
    const gated = new GatedStreams();
    const b = await startBroker({ maxPendingAcks: 3 }, gated);
    try {
      await b.engine.createStream({ name: 'q0', partitions: 1, bindings: ['q0/#'] });
      const c = await RawClient.connect(b.port, 'firehose');
      gated.hold = true;
      for (let i = 0; i < 3; i++) c.send(encodePublishFrame('q0/x', Buffer.from(`m${i}`), 0, false, false, 0));
      await until(() => gated.held === 3, 'three held appends');
      // Reading has stopped: these wait in the socket.
      for (let i = 3; i < 6; i++) c.send(encodePublishFrame('q0/x', Buffer.from(`m${i}`), 0, false, false, 0));
      await sleep(200);
      assert.equal(b.engine.offsets('q0', 0).highWatermark, 3, 'nothing more read while three are being stored');
      gated.release();
      gated.hold = false;
      await until(() => b.engine.offsets('q0', 0).highWatermark === 6, 'the rest read once they were stored');
      assert.deepEqual(c.packets, [], 'QoS 0: nothing is sent back');
      c.destroy();
    } finally {
      await b.close();
    }
  });

  test('a failed durable write closes the connection with a log line', async () => {
    const gated = new GatedStreams();
    const b = await startBroker({}, gated);
    try {
      await b.engine.createStream({ name: 'broken', partitions: 1, bindings: ['broken/#'] });
      const c = await RawClient.connect(b.port, 'unlucky');
      gated.fail = true;
      c.send(encodePublishFrame('broken/x', Buffer.from('a'), 1, false, false, 1));
      await c.waitClosed();
      assert.equal(c.packets.length, 0, 'no PUBACK for a message that was not stored');
      assert.ok(b.logs.some((l) => l.msg === 'mqtt publish could not be stored, closing connection' && String(l.err).includes('disk on fire')));
    } finally {
      await b.close();
    }
  });

  test('asynchronous authenticator: packets pipelined after CONNECT wait for it [MQTT-3.1.4-5]', async () => {
    const b = await startBroker({ authenticate: () => sleep(50).then(() => 'ok' as const) });
    try {
      const c = await RawClient.open(b.port);
      c.send(
        Buffer.concat([
          encodePacket({
            type: 'connect',
            protocolName: 'MQTT',
            protocolLevel: 4,
            cleanSession: true,
            keepalive: 0,
            clientId: 'pipelined',
            will: null,
            username: 'u',
            password: Buffer.from('p'),
          }),
          encodePacket({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'p/#', qos: 1 }] }),
          encodePacket({ type: 'pingreq' }),
        ]),
      );
      await until(() => c.packets.length === 3, 'three answers');
      assert.deepEqual(
        c.packets.map((p) => p.type),
        ['connack', 'suback', 'pingresp'],
      );
      c.destroy();
    } finally {
      await b.close();
    }
  });

  test('granted QoS is capped by maxQos', async () => {
    const b = await startBroker({ maxQos: 1 });
    try {
      const c = await client(b);
      const [g] = await c.subscribeAsync('cap/#', { qos: 2 });
      assert.equal(g.qos, 1);
      await c.endAsync();
    } finally {
      await b.close();
    }
  });

  test('a packet over maxPacketSize closes the connection; smaller ones pass', async () => {
    const b = await startBroker({ maxPacketSize: 1024 });
    try {
      const c = await RawClient.connect(b.port, 'big');
      c.send(encodePublishFrame('t', Buffer.alloc(500), 1, false, false, 1));
      await c.next('puback');
      c.send(encodePublishFrame('t', Buffer.alloc(2000), 1, false, false, 2));
      await c.waitClosed();
      assert.ok(b.logs.some((l) => l.msg === PROTOCOL_ERROR_LINE && /exceeds the maximum packet size of 1024/.test(String(l.err))));
    } finally {
      await b.close();
    }
  });

  test('no CONNECT within connectTimeoutMs closes the socket', async () => {
    const b = await startBroker({ connectTimeoutMs: 150 });
    try {
      const c = await RawClient.open(b.port);
      await c.waitClosed(2000);
      assert.ok(b.logs.some((l) => l.msg === 'mqtt connect timeout, closing connection'));
    } finally {
      await b.close();
    }
  });
});

// ------------------------------------------------------------------ flow control over a test stream pair

/** A server-side stream whose writes never complete: a client that stopped reading. */
function stuckStream(): { server: Duplex; toServer(b: Buffer): void } {
  const server = new Duplex({
    read() {},
    write(_chunk, _enc, _cb) {
      // never calls back: everything stays in writableLength
    },
  });
  return { server, toServer: (b) => void server.push(b) };
}

/** Collects what the server writes, chunk by chunk, through a stream pair. */
function pairStream(): { server: Duplex; toServer(b: Buffer): void; written: Buffer[] } {
  const written: Buffer[] = [];
  const server = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, cb) {
      written.push(chunk);
      cb();
    },
    // One entry per writev call: shows how many writes were batched into one.
    writev(chunks: Array<{ chunk: Buffer }>, cb) {
      written.push(Buffer.concat(chunks.map((c) => c.chunk)));
      cb();
    },
  });
  return { server, toServer: (b) => void server.push(b), written };
}

describe('mqtt connection flow control (stream pair)', () => {
  const logger = pino({ level: 'silent' });

  function setup(stream: Duplex, opts = {}) {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    const conn = new MqttConnection(stream, { engine, logger, brokerId: 1 }, { options: opts });
    return { engine, conn };
  }

  const connectBytes = (id: string) =>
    encodePacket({
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 4,
      cleanSession: true,
      keepalive: 0,
      clientId: id,
      will: null,
      username: null,
      password: null,
    });

  test('a slow consumer: QoS 0 dropped over the write high-water mark, QoS 1 bounded by in-flight + queue', async () => {
    const s = stuckStream();
    const { engine, conn } = setup(s.server, { writeHighWaterMark: 64 * 1024, maxInflight: 10, maxQueued: 50 });
    s.toServer(connectBytes('slow'));
    s.toServer(encodePacket({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'f/#', qos: 1 }] }));
    await until(() => conn.isConnected && engine.hasLiveSubscribers('f/x'), 'subscription');

    const kb = Buffer.alloc(1024);
    for (let i = 0; i < 1000; i++) engine.publish(makeMessage('f/0', kb, { qos: 0 }));
    assert.ok(s.server.writableLength <= 64 * 1024 + 2048, `buffered ${s.server.writableLength}`);
    assert.ok(conn.stats.dropped > 900, `dropped ${conn.stats.dropped}`);
    assert.equal(engine.stats.dropped, conn.stats.dropped);
    // A dropped message is not a delivered one.
    assert.equal(engine.stats.delivered, 1000 - conn.stats.dropped);

    const before = conn.stats.dropped;
    for (let i = 0; i < 1000; i++) engine.publish(makeMessage('f/1', kb, { qos: 1 }));
    assert.equal(conn.inflightCount, 10);
    assert.equal(conn.queued, 50);
    assert.equal(conn.stats.dropped - before, 940);

    // Acknowledging the window moves queued messages into flight (ids are handed out from 1).
    for (let id = 1; id <= 10; id++) s.toServer(encodePacket({ type: 'puback', packetId: id }));
    await until(() => conn.queued === 40, 'queue to drain by ten');
    assert.equal(conn.inflightCount, 10);
    s.server.destroy();
    await conn.closed;
  });

  test('a full queue evicts QoS 0 before QoS 1', async () => {
    const s = stuckStream();
    const { engine, conn } = setup(s.server, { maxInflight: 1, maxQueued: 3 });
    s.toServer(connectBytes('evict'));
    s.toServer(encodePacket({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'e/#', qos: 1 }] }));
    await until(() => engine.hasLiveSubscribers('e/x'), 'subscription');
    const pub = (qos: 0 | 1, p: string) => engine.publish(makeMessage('e/x', Buffer.from(p), { qos }));
    pub(1, 'in-flight');
    pub(1, 'q1'); // queued behind the full window
    pub(0, 'q0'); // queued too, to keep order
    pub(1, 'q2');
    assert.equal(conn.queued, 3);
    pub(1, 'q3'); // queue full: the QoS 0 message makes room
    assert.equal(conn.queued, 3);
    assert.equal(conn.stats.dropped, 1);
    pub(0, 'q4'); // queue full of QoS 1: the new QoS 0 message is dropped
    pub(1, 'q5'); // nothing to evict: dropped
    assert.equal(conn.stats.dropped, 3);
    s.server.destroy();
    await conn.closed;
  });

  test('chunking: byte-by-byte headers and a large packet in pieces; writes of one tick are corked together', async () => {
    const s = pairStream();
    const { engine, conn } = setup(s.server);
    const got: Message[] = [];
    const probe: Subscriber = { id: 'probe', deliver: (m: Message, _subs: Subscription[]) => void got.push(m) };
    engine.subscribe('c/#', probe, { qos: 0 });
    for (const byte of connectBytes('chunky')) s.toServer(Buffer.from([byte]));
    await until(() => conn.isConnected, 'connected');
    const big = encodePublishFrame('c/big', Buffer.alloc(100_000, 'q'), 0, false, false, 0);
    for (let off = 0; off < big.length; off += 1000) s.toServer(big.subarray(off, off + 1000));
    await until(() => got.length === 1, 'big message');
    assert.equal(got[0].payload.length, 100_000);

    // Ten PINGREQs in one chunk: ten PINGRESPs leave in one corked flush.
    s.written.length = 0;
    s.toServer(Buffer.concat(Array.from({ length: 10 }, () => encodePacket({ type: 'pingreq' }))));
    await until(() => Buffer.concat(s.written).length === 20, 'ten PINGRESPs');
    assert.equal(s.written.length, 1, 'one batched write');
    s.server.destroy();
    await conn.closed;
  });
});
