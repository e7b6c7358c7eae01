/**
 * Hostile and slow clients: half-sent packets (packet timeout whatever the keep-alive, one bound on the memory
 * of unfinished packets over all connections), slow consumers (drops counted as dropped and not delivered,
 * `$SYS/broker/messages/dropped`, the 'disconnect' policy), and the log lines a client can trigger (no second
 * `level` key, a bounded number per address). Raw sockets for what no real client sends; MQTT.js where a real
 * client shows the effect.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IDisconnectPacket, type MqttClient } from 'mqtt';
import { ReasonCode, encodePublishFrame } from '../../../src/protocols/mqtt/codec/index.js';
import { RawClient, connectPacket, startBroker, until, type TestBroker } from './helpers.js';

const text = (b: Buffer) => b.toString();

async function v5Raw(b: TestBroker, clientId: string): Promise<RawClient> {
  const c = await RawClient.open(b.port);
  c.level = 5;
  c.send(connectPacket(clientId, { protocolLevel: 5, properties: {} }));
  assert.equal((await c.next('connack')).returnCode, 0);
  return c;
}

describe('mqtt hostile clients: half-sent packets', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({ packetTimeoutMs: 300, tickMs: 50, sysIntervalMs: 0 });
  });
  after(() => b.close());

  test('a PUBLISH left half-sent with keep-alive 0 is closed after the packet timeout; an idle client is not', async () => {
    const hub = b.listener.hub;
    const idle = await RawClient.connect(b.port, 'idle', { keepalive: 0 });
    const frame = encodePublishFrame('half/x', Buffer.alloc(1_000_000, 'h'), 0, false, false, 0);

    const v4 = await RawClient.connect(b.port, 'half-v4', { keepalive: 0 });
    v4.send(frame.subarray(0, 50_000));
    const v5 = await v5Raw(b, 'half-v5');
    v5.send(frame.subarray(0, 20_000));
    await until(() => hub.partialBytes === 70_000, 'both partial packets to be held');

    await v4.waitClosed(15_000);
    // v5 is told why first: 0x8D, the spec's reason code for a client that did not send in time.
    const d = await v5.next('disconnect', 15_000);
    assert.equal(d.reasonCode, ReasonCode.KEEP_ALIVE_TIMEOUT);
    assert.match(String(d.properties?.reasonString), /packet not completed/);
    await v5.waitClosed();
    assert.equal(hub.stats.packetTimeouts, 2);
    assert.equal(hub.partialBytes, 0, 'their memory is released');
    assert.equal(hub.partialBytesPeak, 70_000);
    assert.equal(b.logs.filter((l) => l.msg === 'mqtt packet not completed in time, closing connection').length, 2);

    // A client that finished its packets is not concerned, however long it stays quiet (keep-alive 0).
    idle.send({ type: 'pingreq' });
    await idle.next('pingresp');
    idle.destroy();
  });

  test('unfinished packets over maxPartialBytes: the newcomer is closed (v5 0x97), the others keep working', async (t) => {
    // Its own broker: the packet timeout stays at its default here.
    const b = await startBroker({ maxPartialBytes: 100_000, sysIntervalMs: 0 });
    t.after(() => b.close());
    const hub = b.listener.hub;
    const sub = await mqtt.connectAsync(b.url, { reconnectPeriod: 0 });
    const got: string[] = [];
    sub.on('message', (t, p) => got.push(`${t} ${p.length}`));
    await sub.subscribeAsync('big/#', { qos: 0 });

    // The first holds 60,000 bytes of an 80,000-byte packet.
    const first = await RawClient.connect(b.port, 'holder', { keepalive: 0 });
    const frame = encodePublishFrame('big/one', Buffer.alloc(80_000, 'b'), 0, false, false, 0);
    first.send(frame.subarray(0, 60_000));
    await until(() => hub.partialBytes === 60_000, 'the first partial packet to be held');

    // The newcomer's 60,000 would take the total over 100,000: it goes, with v5 Quota exceeded.
    const newcomer = await v5Raw(b, 'newcomer');
    newcomer.send(encodePublishFrame('big/two', Buffer.alloc(200_000, 'n'), 0, false, false, 0).subarray(0, 60_000));
    const d = await newcomer.next('disconnect', 10_000);
    assert.equal(d.reasonCode, ReasonCode.QUOTA_EXCEEDED);
    await newcomer.waitClosed();
    assert.equal(hub.stats.partialBytesRefused, 1);
    assert.equal(hub.partialBytes, 60_000, "the newcomer's bytes are released, the first one's kept");

    // The first finishes its packet and it is delivered; a plain client still publishes.
    first.send(frame.subarray(60_000));
    await until(() => got.includes('big/one 80000'), 'the first packet delivered');
    assert.equal(hub.partialBytes, 0);
    await sub.publishAsync('big/small', 'x', { qos: 1 });
    await until(() => got.includes('big/small 1'), 'a small message');
    assert.equal(first.isClosed, false);
    assert.ok(!got.some((g) => g.startsWith('big/two')));
    first.destroy();
    await sub.endAsync();
  });
});

describe('mqtt hostile clients: slow consumers, drop policy', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({ maxInflight: 5, maxQueued: 10, sysIntervalMs: 0 });
  });
  after(() => b.close());

  test('a subscriber that never acknowledges: overflow counted as dropped, not delivered, and in $SYS', async () => {
    const hub = b.listener.hub;
    // Reads its socket but never sends PUBACK: 5 in flight, 10 queued, the rest has nowhere to go.
    const slow = await RawClient.connect(b.port, 'never-acks');
    slow.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'slow/#', qos: 1 }] });
    await slow.next('suback');
    const pub = await mqtt.connectAsync(b.url, { reconnectPeriod: 0 });
    const deliveredBefore = b.engine.stats.delivered;
    for (let i = 0; i < 30; i++) await pub.publishAsync('slow/x', `m${i}`, { qos: 1 });
    await until(() => slow.packets.filter((p) => p.type === 'publish').length === 5, 'the window to be sent');

    assert.equal(hub.stats.dropped.queueFull, 15);
    assert.equal(b.engine.stats.dropped, 15);
    // 30 handed to the session, 15 of them dropped: only the other 15 count as delivered.
    assert.equal(b.engine.stats.delivered - deliveredBefore, 15);
    assert.equal(hub.stats.messagesSent, 5, 'sent counts what was written, never a dropped message');

    hub.publishSys();
    const watcher = await mqtt.connectAsync(b.url, { reconnectPeriod: 0 });
    const sys = new Map<string, string>();
    watcher.on('message', (t, p) => sys.set(t, text(p)));
    await watcher.subscribeAsync('$SYS/broker/messages/#', { qos: 0 });
    await until(() => sys.has('$SYS/broker/messages/dropped') && sys.has('$SYS/broker/messages/sent'), '$SYS figures');
    assert.equal(sys.get('$SYS/broker/messages/dropped'), '15');
    assert.equal(sys.get('$SYS/broker/messages/sent'), '5');
    assert.deepEqual(hub.figures().dropped, { queueFull: 15, writeBuffer: 0, quota: 0, tooLarge: 0, expired: 0, offline: 0, closed: 0, notAuthorized: 0 });
    slow.destroy();
    await Promise.all([pub.endAsync(), watcher.endAsync()]);
  });
});

describe('mqtt hostile clients: slow consumers, disconnect policy', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({ slowConsumer: 'disconnect', maxInflight: 2, maxQueued: 3, sysIntervalMs: 0 });
  });
  after(() => b.close());

  const publishSix = async (topic: string) => {
    const pub = await mqtt.connectAsync(b.url, { reconnectPeriod: 0 });
    for (let i = 0; i < 6; i++) await pub.publishAsync(topic, `m${i}`, { qos: 1 });
    await pub.endAsync();
  };

  test('MQTT.js v5 that stops reading gets DISCONNECT 0x97; its persistent session keeps every message', async () => {
    const hub = b.listener.hub;
    const opts = { protocolVersion: 5 as const, reconnectPeriod: 0, clientId: 'paused-v5', clean: false, properties: { sessionExpiryInterval: 300 } };
    const sub = await mqtt.connectAsync(b.url, opts);
    await sub.subscribeAsync('sc/#', { qos: 1 });
    const disconnected = new Promise<IDisconnectPacket>((resolve) => sub.once('disconnect', resolve));
    // The client stops reading its socket: no PUBACK, the window (2) and the queue (3) fill up.
    sub.stream.pause();
    await publishSix('sc/x');
    await until(() => hub.stats.slowConsumerDisconnects === 1, 'the slow consumer to be disconnected');
    sub.stream.resume();
    const d = await disconnected;
    assert.equal(d.reasonCode, ReasonCode.QUOTA_EXCEEDED);
    await sub.endAsync(true);
    assert.equal(b.engine.stats.dropped, 0, 'nothing dropped');

    // Resumed: everything, the unacknowledged window (re-sent) first, then the queue and the sixth message.
    const again = mqtt.connect(b.url, opts);
    const got: string[] = [];
    again.on('message', (_t, p) => got.push(text(p)));
    await until(() => got.length >= 6, 'six messages after resuming');
    assert.deepEqual(got, ['m0', 'm1', 'm2', 'm3', 'm4', 'm5']);
    await again.endAsync();
    assert.equal(b.logs.filter((l) => l.msg === 'mqtt slow consumer, disconnecting').length, 1);
  });

  test('3.1.1 clean session: a plain close; what it had not been sent is counted as dropped', async () => {
    const hub = b.listener.hub;
    const before = hub.stats.slowConsumerDisconnects;
    const slow = await RawClient.connect(b.port, 'never-acks-v4');
    slow.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'sc4/#', qos: 1 }] });
    await slow.next('suback');
    const deliveredBefore = b.engine.stats.delivered;
    await publishSix('sc4/x');
    await slow.waitClosed();
    assert.equal(hub.stats.slowConsumerDisconnects, before + 1);
    assert.ok(!slow.packets.some((p) => p.type === 'disconnect'), 'no DISCONNECT below v5');
    // Two were sent (in flight), three queued and the sixth end with the session.
    assert.equal(hub.stats.dropped.closed, 4);
    assert.equal(b.engine.stats.delivered - deliveredBefore, 2);
  });
});

describe('mqtt hostile clients: log lines', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({ sysIntervalMs: 0, connectTimeoutMs: 200, tickMs: 50, logLimit: { perKey: 3, windowMs: 600_000 } });
  });
  after(() => b.close());

  test('"mqtt client connected" carries the protocol version, not a second level key', async () => {
    const c: MqttClient = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0, clientId: 'logged' });
    await c.endAsync();
    const line = b.logs.find((l) => l.msg === 'mqtt client connected' && l.clientId === 'logged');
    assert.ok(line);
    assert.equal(line.level, 20, "the line's own level (debug) is not overwritten");
    assert.equal(line.protocolVersion, 5);
  });

  test('many bad connects from one address: a bounded number of lines, the rest counted as suppressed', async () => {
    const hub = b.listener.hub;
    const count = (msg: string) => b.logs.filter((l) => l.msg === msg).length;
    for (let i = 0; i < 12; i++) {
      const c = await RawClient.open(b.port);
      c.send(Buffer.from('GET / HTTP/1.1\r\n\r\n'));
      await c.waitClosed();
    }
    for (let i = 0; i < 8; i++) {
      // [MQTT-3.1.3-8] an empty client id with Clean Session 0: refused.
      const c = await RawClient.open(b.port);
      c.send(connectPacket('', { cleanSession: false }));
      await c.waitClosed();
    }
    const silent = await Promise.all(Array.from({ length: 6 }, () => RawClient.open(b.port)));
    await Promise.all(silent.map((c) => c.waitClosed(10_000)));

    assert.equal(count('mqtt protocol error, closing connection'), 3);
    assert.equal(count('mqtt connect refused'), 3);
    assert.equal(count('mqtt connect timeout, closing connection'), 3);
    assert.equal(hub.logLimit.suppressedTotal, 9 + 5 + 3);
    assert.equal(hub.figures().logLinesSuppressed, 17);
  });
});
