/**
 * MQTT 5.0 and session behaviour against MQTT.js (protocol 5 and 4) and a raw client: reason codes,
 * properties end to end, flow control, persistent sessions, retained messages, wills, shared subscriptions,
 * $SYS. In-process broker over the in-memory session store; the restart across processes is in test/e2e.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IClientOptions, type IPublishPacket, type MqttClient } from 'mqtt';
import { MemoryRetainedStore, MemorySessionStore, makeMessage } from '../../../src/core/index.js';
import { encodePacket, type MqttPacket } from '../../../src/protocols/mqtt/codec/index.js';
import { RawClient, sleep, startBroker, until, type TestBroker } from './helpers.js';

function v5(b: TestBroker, opts: IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 3000, ...opts });
}
function v4(b: TestBroker, opts: IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(b.url, { protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 3000, ...opts });
}
function collect(c: MqttClient): IPublishPacket[] {
  const got: IPublishPacket[] = [];
  c.on('message', (_t, _p, packet) => got.push(packet));
  return got;
}
const text = (p: IPublishPacket) => p.payload.toString();

/** A raw v5 client: CONNECT at level 5 and read what comes back, decoding at level 5. */
async function raw5(b: TestBroker, clientId: string, props: Record<string, unknown> = {}, init: Partial<Extract<MqttPacket, { type: 'connect' }>> = {}) {
  const c = await RawClient.open(b.port);
  c.level = 5;
  c.send(
    encodePacket({
      type: 'connect',
      protocolName: 'MQTT',
      protocolLevel: 5,
      cleanSession: true,
      keepalive: 0,
      clientId,
      will: null,
      username: null,
      password: null,
      properties: props,
      ...init,
    }),
  );
  const connack = await c.next('connack');
  return { c, connack };
}

describe('mqtt 5: connect, properties and reason codes', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({ topicAliasMaximum: 4, maxInflight: 5, maxTopicLevels: 4, sysIntervalMs: 0 });
  });
  after(() => b.close());

  test('empty client id gets an Assigned Client Identifier; CONNACK advertises the limits', async () => {
    const { c, connack } = await raw5(b, '');
    assert.equal(connack.returnCode, 0);
    assert.match(String(connack.properties?.assignedClientIdentifier), /^flowmq-[0-9a-f]{16}$/);
    assert.equal(connack.properties?.receiveMaximum, 5);
    assert.equal(connack.properties?.topicAliasMaximum, 4);
    assert.equal(connack.properties?.maximumPacketSize, 1024 * 1024);
    c.destroy();
  });

  test('user properties, content type, response topic, correlation data, payload format pass through', async () => {
    const sub = await v5(b);
    const pub = await v5(b);
    try {
      const got = collect(sub);
      await sub.subscribeAsync('req/#', { qos: 1 });
      await pub.publishAsync('req/x', 'hello', {
        qos: 1,
        properties: {
          userProperties: { a: '1', b: '2' },
          contentType: 'text/plain',
          responseTopic: 'resp/x',
          correlationData: Buffer.from('cid'),
          payloadFormatIndicator: true,
          messageExpiryInterval: 100,
        },
      });
      await until(() => got.length === 1, 'delivery');
      const p = got[0].properties!;
      assert.deepEqual({ ...p.userProperties }, { a: '1', b: '2' });
      assert.equal(p.contentType, 'text/plain');
      assert.equal(p.responseTopic, 'resp/x');
      assert.equal(Buffer.from(p.correlationData!).toString(), 'cid');
      assert.equal(p.payloadFormatIndicator, true);
      assert.ok(p.messageExpiryInterval! <= 100 && p.messageExpiryInterval! >= 99, `remaining expiry ${p.messageExpiryInterval}`);
    } finally {
      await Promise.all([sub.endAsync(), pub.endAsync()]);
    }
  });

  test('properties from other protocols that MQTT cannot carry are left out, not sent malformed', async () => {
    // A message from a Kafka record or an AMQP publish may hold what no MQTT publisher could send: a payload format
    // above 1, a response topic with wildcards, strings with U+0000 or over 65535 bytes, an expiry beyond 2^32-1 s.
    const { c } = await raw5(b, 'props-foreign');
    try {
      c.send(encodePacket({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'foreign/#', qos: 1 }], properties: {} }, 5));
      await c.next('suback');
      const big = 'x'.repeat(70_000);
      await b.engine.publish(
        makeMessage('foreign/1', Buffer.from([0xff]), {
          qos: 1,
          payloadFormat: 2,
          contentType: 'text/\u0000plain',
          responseTopic: 'reply/#',
          correlationData: Buffer.alloc(70_000),
          expiresAt: Date.now() + 1e15,
          headers: [
            { key: 'ok', value: Buffer.from('1') },
            { key: 'nul', value: Buffer.from('a\u0000b') },
            { key: big, value: null },
            { key: 'long', value: Buffer.from(big) },
            { key: 'ok2', value: null },
          ],
        }),
      );
      await b.engine.publish(
        makeMessage('foreign/2', Buffer.from('fine'), {
          qos: 1,
          payloadFormat: 1,
          contentType: 'text/plain',
          responseTopic: 'reply/2',
          correlationData: Buffer.from('c'),
        }),
      );
      // The client's own decoder checks what the MQTT spec requires of a server's PUBLISH.
      const first = await c.next('publish');
      assert.equal(first.topic, 'foreign/1');
      assert.equal(first.properties?.payloadFormatIndicator, undefined);
      assert.equal(first.properties?.contentType, undefined);
      assert.equal(first.properties?.responseTopic, undefined);
      assert.equal(first.properties?.correlationData, undefined);
      assert.equal(first.properties?.messageExpiryInterval, 0xffffffff);
      assert.deepEqual(first.properties?.userProperties, [
        ['ok', '1'],
        ['ok2', ''],
      ]);
      const second = await c.next('publish');
      assert.equal(second.topic, 'foreign/2');
      assert.equal(second.properties?.payloadFormatIndicator, 1);
      assert.equal(second.properties?.contentType, 'text/plain');
      assert.equal(second.properties?.responseTopic, 'reply/2');
      assert.deepEqual(second.properties?.correlationData, Buffer.from('c'));
    } finally {
      c.destroy();
    }
  });

  test('subscription identifiers, no local, retain as published', async () => {
    const c = await v5(b);
    try {
      const got = collect(c);
      await c.subscribeAsync('si/a', { qos: 1, properties: { subscriptionIdentifier: 7 } });
      await c.subscribeAsync('si/+', { qos: 1, properties: { subscriptionIdentifier: 9 }, rap: true });
      await c.subscribeAsync('nl/#', { qos: 1, nl: true });
      await c.publishAsync('nl/x', 'own', { qos: 1 });
      await c.publishAsync('si/a', 'both', { qos: 1, retain: true });
      await until(() => got.length === 1, 'delivery');
      await sleep(50);
      assert.equal(got.length, 1, 'no-local subscription did not echo');
      assert.equal(text(got[0]), 'both');
      assert.deepEqual([...(got[0].properties!.subscriptionIdentifier as number[])].sort(), [7, 9]);
      assert.equal(got[0].retain, true, 'retain as published');
      await c.publishAsync('si/a', '', { qos: 1, retain: true });
    } finally {
      await c.endAsync();
    }
  });

  test('message expiry: an expired message is not delivered from the offline queue', async () => {
    const sub = await v5(b, { clientId: 'exp-sub', clean: false, properties: { sessionExpiryInterval: 60 } });
    await sub.subscribeAsync('exp/t', { qos: 1 });
    await sub.endAsync();
    const pub = await v5(b);
    await pub.publishAsync('exp/t', 'short', { qos: 1, properties: { messageExpiryInterval: 1 } });
    await pub.publishAsync('exp/t', 'long', { qos: 1, properties: { messageExpiryInterval: 60 } });
    await pub.endAsync();
    await sleep(1100);
    const again = mqtt.connect(b.url, { protocolVersion: 5, reconnectPeriod: 0, clientId: 'exp-sub', clean: false, properties: { sessionExpiryInterval: 0 } });
    const got = collect(again);
    try {
      await until(() => got.length >= 1, 'queued delivery');
      await sleep(100);
      assert.deepEqual(got.map(text), ['long']);
      assert.ok(got[0].properties!.messageExpiryInterval! <= 60);
    } finally {
      await again.endAsync();
    }
  });

  test('topic aliases both ways', async () => {
    const sub = await v5(b, { properties: { topicAliasMaximum: 3 } });
    const pub = await v5(b);
    try {
      const got = collect(sub);
      await sub.subscribeAsync('alias/#', { qos: 0 });
      // MQTT.js resolves incoming aliases itself; the raw bytes show the empty topic on the second one.
      const raw: Buffer[] = [];
      sub.stream.on('data', (d: Buffer) => raw.push(d));
      await pub.publishAsync('alias/one', '1', { properties: { topicAlias: 2 } });
      await pub.publishAsync('', '2', { properties: { topicAlias: 2 } });
      await until(() => got.length === 2, 'two deliveries');
      // The broker resolved the client's alias; towards the subscriber it set its own: topic + alias once,
      // then the alias alone (empty topic name).
      assert.deepEqual(got.map(text), ['1', '2']);
      assert.equal(got[0].topic, 'alias/one');
      const alias = got[0].properties?.topicAlias;
      assert.ok(alias !== undefined && alias >= 1 && alias <= 3);
      assert.equal(got[1].properties?.topicAlias, alias);
      assert.ok(Buffer.concat(raw).includes(Buffer.from([0x30, 0x07, 0x00, 0x00])), 'a PUBLISH with an empty topic name went out');
    } finally {
      await Promise.all([sub.endAsync(), pub.endAsync()]);
    }
  });

  test('an undefined topic alias or one above the maximum: DISCONNECT 0x82 / 0x94', async () => {
    const { c } = await raw5(b, 'alias-bad');
    c.send(
      encodePacket({ type: 'publish', dup: false, qos: 0, retain: false, topic: 't', packetId: 0, payload: Buffer.alloc(0), properties: { topicAlias: 5 } }, 5),
    );
    const d = await c.next('disconnect');
    assert.equal(d.reasonCode, 0x94);
    await c.waitClosed();
    const { c: c2 } = await raw5(b, 'alias-undef');
    c2.send(
      encodePacket({ type: 'publish', dup: false, qos: 0, retain: false, topic: '', packetId: 0, payload: Buffer.alloc(0), properties: { topicAlias: 1 } }, 5),
    );
    assert.equal((await c2.next('disconnect')).reasonCode, 0x82);
    await c2.waitClosed();
  });

  test('receive maximum: more unacknowledged QoS 2 than granted is DISCONNECT 0x93', async () => {
    const { c } = await raw5(b, 'flood');
    for (let id = 1; id <= 6; id++) {
      c.send(encodePacket({ type: 'publish', dup: false, qos: 2, retain: false, topic: 'flood/x', packetId: id, payload: Buffer.alloc(1), properties: {} }, 5));
    }
    assert.equal((await c.next('disconnect')).reasonCode, 0x93);
    await c.waitClosed();
  });

  test('too many topic levels: PUBACK 0x90 and SUBACK 0x8F, the connection stays', async () => {
    const { c } = await raw5(b, 'levels');
    c.send(encodePacket({ type: 'publish', dup: false, qos: 1, retain: false, topic: 'a/b/c/d/e', packetId: 3, payload: Buffer.alloc(0), properties: {} }, 5));
    const ack = await c.next('puback');
    assert.equal(ack.reasonCode, 0x90);
    c.send(
      encodePacket(
        {
          type: 'subscribe',
          packetId: 4,
          subscriptions: [
            { filter: 'a/b/c/d/#', qos: 0 },
            { filter: 'ok/#', qos: 1 },
          ],
          properties: {},
        },
        5,
      ),
    );
    assert.deepEqual((await c.next('suback')).returnCodes, [0x8f, 1]);
    c.send(encodePacket({ type: 'unsubscribe', packetId: 5, filters: ['ok/#', 'never'], properties: {} }, 5));
    assert.deepEqual((await c.next('unsuback')).reasonCodes, [0, 0x11]);
    c.destroy();
  });

  test('a subscription identifier in a client PUBLISH is a protocol error [MQTT-3.3.4-6]', async () => {
    const { c } = await raw5(b, 'subid-pub');
    c.send(
      encodePacket(
        { type: 'publish', dup: false, qos: 0, retain: false, topic: 't', packetId: 0, payload: Buffer.alloc(0), properties: { subscriptionIdentifiers: [1] } },
        5,
      ),
    );
    assert.equal((await c.next('disconnect')).reasonCode, 0x82);
    await c.waitClosed();
  });

  test('a second CONNECT gets DISCONNECT 0x82 [MQTT-3.1.0-2]; malformed input 0x81', async () => {
    const { c } = await raw5(b, 'twice');
    c.send(
      encodePacket({
        type: 'connect',
        protocolName: 'MQTT',
        protocolLevel: 5,
        cleanSession: true,
        keepalive: 0,
        clientId: 'twice',
        will: null,
        username: null,
        password: null,
        properties: {},
      }),
    );
    assert.equal((await c.next('disconnect')).reasonCode, 0x82);
    await c.waitClosed();
    const { c: c2 } = await raw5(b, 'garbage');
    c2.send(Buffer.from([0x30, 0x04, 0x00, 0x02, 0xc3, 0x28])); // ill-formed UTF-8 topic
    assert.equal((await c2.next('disconnect')).reasonCode, 0x81);
    await c2.waitClosed();
  });

  test('client Maximum Packet Size: larger messages are not sent to it', async () => {
    const small = await v5(b, { properties: { maximumPacketSize: 200 } });
    const pub = await v5(b);
    try {
      const got = collect(small);
      await small.subscribeAsync('mps/#', { qos: 1 });
      await pub.publishAsync('mps/big', Buffer.alloc(500), { qos: 1 });
      await pub.publishAsync('mps/small', 'x', { qos: 1 });
      await until(() => got.length === 1, 'small one');
      await sleep(50);
      assert.deepEqual(
        got.map((p) => p.topic),
        ['mps/small'],
      );
    } finally {
      await Promise.all([small.endAsync(), pub.endAsync()]);
    }
  });

  test('session takeover: the first v5 connection gets DISCONNECT 0x8E and its will is published', async () => {
    const watcher = await v5(b);
    const got = collect(watcher);
    await watcher.subscribeAsync('wills/takeover', { qos: 1 });
    const first = await v5(b, { clientId: 'dup-id', will: { topic: 'wills/takeover', payload: Buffer.from('gone'), qos: 1, retain: false } });
    const reason = new Promise<number | undefined>((resolve) => first.once('disconnect', (p) => resolve(p.reasonCode)));
    const second = await v5(b, { clientId: 'dup-id' });
    try {
      assert.equal(await reason, 0x8e);
      await until(() => got.length === 1, 'will');
      assert.equal(text(got[0]), 'gone');
    } finally {
      first.end(true);
      await Promise.all([second.endAsync(), watcher.endAsync()]);
    }
  });

  test('enhanced authentication without a configured method: CONNACK 0x8C', async () => {
    const { c, connack } = await raw5(b, 'auth-m', { authenticationMethod: 'SCRAM-SHA-256' });
    assert.equal(connack.returnCode, 0x8c);
    await c.waitClosed();
  });
});

describe('mqtt 5: enhanced authentication hook (AUTH exchange)', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({
      sysIntervalMs: 0,
      enhancedAuth: ({ method, data, step }) => {
        if (method !== 'DEMO') return { result: 'fail' };
        if (step === 0) return { result: 'continue', data: Buffer.from('challenge') };
        return data?.toString() === 'response' ? { result: 'ok', data: Buffer.from('welcome') } : { result: 'fail' };
      },
    });
  });
  after(() => b.close());

  test('CONNECT -> AUTH 0x18 -> AUTH 0x18 -> CONNACK 0x00; re-authentication with AUTH 0x19', async () => {
    const c = await RawClient.open(b.port);
    c.level = 5;
    c.send(
      encodePacket({
        type: 'connect',
        protocolName: 'MQTT',
        protocolLevel: 5,
        cleanSession: true,
        keepalive: 0,
        clientId: 'sc',
        will: null,
        username: null,
        password: null,
        properties: { authenticationMethod: 'DEMO' },
      }),
    );
    const ch = await c.next('auth');
    assert.equal(ch.reasonCode, 0x18);
    assert.equal(ch.properties?.authenticationData?.toString(), 'challenge');
    c.send(encodePacket({ type: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'DEMO', authenticationData: Buffer.from('response') } }, 5));
    const ack = await c.next('connack');
    assert.equal(ack.returnCode, 0);
    assert.equal(ack.properties?.authenticationMethod, 'DEMO');
    assert.equal(ack.properties?.authenticationData?.toString(), 'welcome');
    c.send(encodePacket({ type: 'auth', reasonCode: 0x19, properties: { authenticationMethod: 'DEMO' } }, 5));
    assert.equal((await c.next('auth')).reasonCode, 0x18);
    c.send(encodePacket({ type: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'DEMO', authenticationData: Buffer.from('response') } }, 5));
    assert.equal((await c.next('auth')).reasonCode, 0);
    c.destroy();
  });

  test('a wrong response: CONNACK 0x87', async () => {
    const c = await RawClient.open(b.port);
    c.level = 5;
    c.send(
      encodePacket({
        type: 'connect',
        protocolName: 'MQTT',
        protocolLevel: 5,
        cleanSession: true,
        keepalive: 0,
        clientId: 'sc2',
        will: null,
        username: null,
        password: null,
        properties: { authenticationMethod: 'DEMO' },
      }),
    );
    await c.next('auth');
    c.send(encodePacket({ type: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'DEMO', authenticationData: Buffer.from('nope') } }, 5));
    assert.equal((await c.next('connack')).returnCode, 0x87);
    await c.waitClosed();
  });
});

for (const version of [4, 5] as const) {
  const connect = version === 5 ? v5 : v4;
  const persistent: IClientOptions = version === 5 ? { clean: false, properties: { sessionExpiryInterval: 300 } } : { clean: false };

  describe(`mqtt ${version === 5 ? '5.0' : '3.1.1'}: sessions, QoS 2, retained, wills, shared subscriptions`, () => {
    let b: TestBroker;
    before(async () => {
      b = await startBroker({ sysIntervalMs: 0, maxQueued: 5, tickMs: 100 });
    });
    after(() => b.close());

    test('QoS 2 both ways, exactly once', async () => {
      const sub = await connect(b);
      const pub = await connect(b);
      try {
        const got = collect(sub);
        await sub.subscribeAsync('q2/#', { qos: 2 });
        for (let i = 0; i < 5; i++) await pub.publishAsync('q2/x', `m${i}`, { qos: 2 });
        await until(() => got.length === 5, 'five');
        await sleep(50);
        assert.deepEqual(got.map(text), ['m0', 'm1', 'm2', 'm3', 'm4']);
        assert.ok(got.every((p) => p.qos === 2));
      } finally {
        await Promise.all([sub.endAsync(), pub.endAsync()]);
      }
    });

    test('persistent session: subscriptions and queued QoS 1/2 survive, QoS 0 is not queued, Session Present = 1', async () => {
      const id = `persist-${version}`;
      const s1 = await connect(b, { clientId: id, ...persistent });
      await s1.subscribeAsync('ps/#', { qos: 2 });
      await s1.endAsync();
      const pub = await connect(b);
      await pub.publishAsync('ps/a', 'q1', { qos: 1 });
      await pub.publishAsync('ps/a', 'q0', { qos: 0 });
      await pub.publishAsync('ps/a', 'q2', { qos: 2 });
      await pub.endAsync();
      await sleep(30);
      const s2 = mqtt.connect(b.url, { protocolVersion: version, reconnectPeriod: 0, clientId: id, ...persistent });
      const got = collect(s2);
      const connack = await new Promise<{ sessionPresent: boolean }>((resolve) => s2.once('connect', (p) => resolve(p)));
      try {
        assert.equal(connack.sessionPresent, true);
        await until(() => got.length === 2, 'queued messages');
        await sleep(50);
        assert.deepEqual(got.map(text), ['q1', 'q2']);
      } finally {
        await s2.endAsync();
      }
      // Clean start ends the stored session: nothing present next time.
      const s3 = mqtt.connect(b.url, { protocolVersion: version, reconnectPeriod: 0, clientId: id, clean: true });
      const ack3 = await new Promise<{ sessionPresent: boolean }>((resolve) => s3.once('connect', (p) => resolve(p)));
      assert.equal(ack3.sessionPresent, false);
      await s3.endAsync();
    });

    test('offline queue limit: the oldest messages are dropped', async () => {
      const id = `limit-${version}`;
      const s1 = await connect(b, { clientId: id, ...persistent });
      await s1.subscribeAsync('lim/#', { qos: 1 });
      await s1.endAsync();
      const pub = await connect(b);
      for (let i = 0; i < 8; i++) await pub.publishAsync('lim/x', `m${i}`, { qos: 1 });
      await pub.endAsync();
      await sleep(30);
      const s2 = mqtt.connect(b.url, { protocolVersion: version, reconnectPeriod: 0, clientId: id, ...persistent });
      const got = collect(s2);
      try {
        await until(() => got.length === 5, 'five kept');
        await sleep(50);
        assert.deepEqual(got.map(text), ['m3', 'm4', 'm5', 'm6', 'm7']);
      } finally {
        await s2.endAsync();
      }
    });

    test('unacknowledged QoS 1 is redelivered with DUP on reconnect', async () => {
      const id = `redeliver-${version}`;
      const c = await RawClient.open(b.port);
      c.level = version;
      c.send(
        encodePacket({
          type: 'connect',
          protocolName: 'MQTT',
          protocolLevel: version,
          cleanSession: false,
          keepalive: 0,
          clientId: id,
          will: null,
          username: null,
          password: null,
          properties: version === 5 ? { sessionExpiryInterval: 60 } : undefined,
        }),
      );
      await c.next('connack');
      c.send(
        encodePacket({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'rd/#', qos: 1 }], properties: version === 5 ? {} : undefined }, version),
      );
      await c.next('suback');
      const pub = await connect(b);
      await pub.publishAsync('rd/x', 'unacked', { qos: 1 });
      await pub.endAsync();
      const first = await c.next('publish');
      assert.equal(first.dup, false);
      c.destroy(); // no PUBACK
      await sleep(50);
      const again = await RawClient.open(b.port);
      again.level = version;
      again.send(
        encodePacket({
          type: 'connect',
          protocolName: 'MQTT',
          protocolLevel: version,
          cleanSession: false,
          keepalive: 0,
          clientId: id,
          will: null,
          username: null,
          password: null,
          properties: version === 5 ? { sessionExpiryInterval: 0 } : undefined,
        }),
      );
      assert.equal((await again.next('connack')).sessionPresent, true);
      const re = await again.next('publish');
      assert.equal(re.dup, true);
      assert.equal(re.packetId, first.packetId, 'original packet identifier [MQTT-4.4.0-1]');
      assert.equal(re.payload.toString(), 'unacked');
      again.send(encodePacket({ type: 'puback', packetId: re.packetId }, version));
      again.send(encodePacket({ type: 'disconnect' }, version));
      await again.waitClosed();
    });

    test('retained: set, replace, clear with an empty payload, delivered on subscribe with RETAIN 1', async () => {
      const pub = await connect(b);
      await pub.publishAsync(`ret${version}/a`, 'one', { qos: 1, retain: true });
      await pub.publishAsync(`ret${version}/a`, 'two', { qos: 1, retain: true });
      await pub.publishAsync(`ret${version}/b`, 'bee', { qos: 0, retain: true });
      await pub.publishAsync(`ret${version}/b`, '', { qos: 0, retain: true });
      const sub = await connect(b);
      const got = collect(sub);
      try {
        await sub.subscribeAsync(`ret${version}/#`, { qos: 1 });
        await until(() => got.length === 1, 'retained');
        await sleep(50);
        assert.deepEqual(
          got.map((p) => [p.topic, text(p), p.retain]),
          [[`ret${version}/a`, 'two', true]],
        );
      } finally {
        await Promise.all([sub.endAsync(), pub.endAsync()]);
      }
    });

    test('will: sent on socket loss, not on DISCONNECT', async () => {
      const w = await connect(b);
      const got = collect(w);
      await w.subscribeAsync(`will${version}/#`, { qos: 1 });
      const clean = await connect(b, { will: { topic: `will${version}/clean`, payload: Buffer.from('x'), qos: 1, retain: false } });
      await clean.endAsync();
      const lost = await connect(b, { will: { topic: `will${version}/lost`, payload: Buffer.from('bye'), qos: 1, retain: false } });
      lost.stream.destroy();
      try {
        await until(() => got.length === 1, 'will');
        await sleep(100);
        assert.deepEqual(
          got.map((p) => p.topic),
          [`will${version}/lost`],
        );
      } finally {
        lost.end(true);
        await w.endAsync();
      }
    });

    test("shared subscription: each message to one member; a vanished member's in-flight go to another", async () => {
      const m1raw = await RawClient.open(b.port);
      m1raw.level = version;
      m1raw.send(
        encodePacket({
          type: 'connect',
          protocolName: 'MQTT',
          protocolLevel: version,
          cleanSession: true,
          keepalive: 0,
          clientId: `m1-${version}`,
          will: null,
          username: null,
          password: null,
          properties: version === 5 ? {} : undefined,
        }),
      );
      await m1raw.next('connack');
      m1raw.send(
        encodePacket(
          { type: 'subscribe', packetId: 1, subscriptions: [{ filter: '$share/g/sh/#', qos: 1 }], properties: version === 5 ? {} : undefined },
          version,
        ),
      );
      await m1raw.next('suback');
      const m2 = await connect(b);
      const got2 = collect(m2);
      await m2.subscribeAsync('$share/g/sh/#', { qos: 1 });
      const pub = await connect(b);
      for (let i = 0; i < 6; i++) await pub.publishAsync('sh/x', `s${i}`, { qos: 1 });
      await until(() => got2.length === 3 && m1raw.packets.filter((p) => p.type === 'publish').length === 3, 'round robin');
      // m1 never acknowledged its three: when it vanishes they go to m2.
      m1raw.destroy();
      try {
        await until(() => got2.length === 6, 'redelivered to the other member');
        assert.deepEqual(got2.map(text).sort(), ['s0', 's1', 's2', 's3', 's4', 's5']);
        await pub.publishAsync('sh/x', 'after', { qos: 1 });
        await until(() => got2.length === 7, 'rebalanced to the remaining member');
      } finally {
        await Promise.all([m2.endAsync(), pub.endAsync()]);
      }
    });
  });
}

describe('mqtt: will delay, retain handling, $SYS, durable retained', () => {
  test('v5 Will Delay Interval: the will waits, and a resumed session cancels it', async () => {
    const b = await startBroker({ sysIntervalMs: 0, tickMs: 50 });
    try {
      const w = await v5(b);
      const got = collect(w);
      await w.subscribeAsync('wd/#', { qos: 1 });
      const will = { topic: 'wd/x', payload: Buffer.from('late'), qos: 1 as const, retain: false, properties: { willDelayInterval: 1 } };
      const a = await v5(b, { clientId: 'wd-a', clean: false, properties: { sessionExpiryInterval: 60 }, will });
      a.stream.destroy();
      await sleep(400);
      assert.equal(got.length, 0, 'not before the delay');
      await until(() => got.length === 1, 'will after the delay', 3000);
      const c = await v5(b, { clientId: 'wd-c', clean: false, properties: { sessionExpiryInterval: 60 }, will: { ...will, topic: 'wd/cancel' } });
      c.stream.destroy();
      await sleep(200);
      const back = await v5(b, { clientId: 'wd-c', clean: false, properties: { sessionExpiryInterval: 60 } });
      await sleep(1300);
      assert.deepEqual(
        got.map((p) => p.topic),
        ['wd/x'],
        'resuming cancelled the second will',
      );
      a.end(true);
      c.end(true);
      await Promise.all([w.endAsync(), back.endAsync()]);
    } finally {
      await b.close();
    }
  });

  test('v5 Retain Handling 0/1/2', async () => {
    const b = await startBroker({ sysIntervalMs: 0 });
    const c = await v5(b);
    try {
      await c.publishAsync('rh/t', 'kept', { qos: 1, retain: true });
      const got = collect(c);
      await c.subscribeAsync('rh/#', { qos: 1, rh: 2 });
      await sleep(50);
      assert.equal(got.length, 0, 'rh 2: never');
      await c.subscribeAsync('rh/+', { qos: 1, rh: 1 });
      await until(() => got.length === 1, 'rh 1: new subscription');
      await c.subscribeAsync('rh/+', { qos: 1, rh: 1 });
      await sleep(50);
      assert.equal(got.length, 1, 'rh 1: not for an existing subscription');
      await c.subscribeAsync('rh/+', { qos: 1, rh: 0 });
      await until(() => got.length === 2, 'rh 0: always');
    } finally {
      await c.endAsync();
      await b.close();
    }
  });

  test('$SYS statistics; # and + do not match $ topics', async () => {
    const b = await startBroker({ sysIntervalMs: 100 });
    const c = await v4(b);
    try {
      const got = collect(c);
      await c.subscribeAsync('#', { qos: 0 });
      await c.subscribeAsync('+/broker/uptime', { qos: 0 });
      await sleep(300);
      assert.ok(
        got.every((p) => !p.topic.startsWith('$')),
        'wildcards skip $SYS',
      );
      await c.subscribeAsync('$SYS/broker/#', { qos: 0 });
      await until(() => got.some((p) => p.topic === '$SYS/broker/clients/connected'), '$SYS');
      const connected = got.find((p) => p.topic === '$SYS/broker/clients/connected')!;
      assert.equal(text(connected), '1');
      assert.ok(got.some((p) => p.topic === '$SYS/broker/version' && /^FlowMQ /.test(text(p))));
      assert.ok(got.some((p) => p.topic === '$SYS/broker/messages/received'));
    } finally {
      await c.endAsync();
      await b.close();
    }
  });

  test('sessions and retained messages stored through the core interfaces outlive the listener', async () => {
    const sessions = new MemorySessionStore();
    const retained = new MemoryRetainedStore();
    const b1 = await startBroker({ sysIntervalMs: 0 }, undefined, { sessions, retained });
    const s = await v5(b1, { clientId: 'outlive', clean: false, properties: { sessionExpiryInterval: 600 } });
    await s.subscribeAsync('ol/#', { qos: 1 });
    await s.endAsync();
    const p = await v5(b1);
    await p.publishAsync('ol/r', 'retained', { qos: 1, retain: true });
    await p.publishAsync('ol/q', 'queued', { qos: 1 });
    await p.endAsync();
    await b1.close();
    const b2 = await startBroker({ sysIntervalMs: 0 }, undefined, { sessions, retained });
    try {
      const again = mqtt.connect(b2.url, {
        protocolVersion: 5,
        reconnectPeriod: 0,
        clientId: 'outlive',
        clean: false,
        properties: { sessionExpiryInterval: 0 },
      });
      const got = collect(again);
      const ack = await new Promise<{ sessionPresent: boolean }>((resolve) => again.once('connect', (x) => resolve(x)));
      assert.equal(ack.sessionPresent, true);
      // Both were published while it was offline: queued in the store, in order.
      await until(() => got.length === 2, 'queued messages');
      assert.deepEqual(got.map(text), ['retained', 'queued']);
      await again.endAsync();
      const fresh = await v4(b2);
      const got2 = collect(fresh);
      await fresh.subscribeAsync('ol/+', { qos: 1 });
      await until(() => got2.length === 1, 'retained from the store');
      assert.deepEqual(
        got2.map((g) => [g.topic, text(g), g.retain]),
        [['ol/r', 'retained', true]],
      );
      await fresh.endAsync();
    } finally {
      await b2.close();
    }
  });
});
