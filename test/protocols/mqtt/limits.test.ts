/**
 * Broker limits and session-lifetime rules told to or enforced on the client: the connection limit (v5 CONNACK
 * 0x97, 3.1.1 CONNACK 0x03), Server Keep Alive and the v5 keep-alive timeout (DISCONNECT 0x8D), Response
 * Information, and a v5 DISCONNECT that changes the Session Expiry Interval [MQTT-3.14.2-2]. Raw clients (to
 * see every property and reason code), MQTT.js v5 and mosquitto_pub -V 5 where a real client shows the effect.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IConnackPacket } from 'mqtt';
import { ConnackCode, ReasonCode, type ConnectPacket } from '../../../src/protocols/mqtt/codec/index.js';
import { RawClient, connectPacket, run, sleep, startBroker, until, type TestBroker } from './helpers.js';

async function raw(b: TestBroker, clientId: string, init: Partial<ConnectPacket> = {}): Promise<RawClient> {
  const c = await RawClient.open(b.port);
  if (init.protocolLevel === 5) c.level = 5;
  c.send(connectPacket(clientId, init));
  return c;
}

describe('mqtt limits: connection limit', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({ maxConnections: 1, sysIntervalMs: 0 });
  });
  after(() => b.close());

  test('beyond maxConnections: v5 CONNACK 0x97, 3.1.1 CONNACK 0x03, then close; room again once one leaves', async () => {
    const first = await raw(b, 'only-one');
    assert.equal((await first.next('connack')).returnCode, 0);

    const v5 = await raw(b, 'second-v5', { protocolLevel: 5, properties: {} });
    assert.equal((await v5.next('connack')).returnCode, ReasonCode.QUOTA_EXCEEDED);
    await v5.waitClosed();
    const v4 = await raw(b, 'second-v4');
    assert.equal((await v4.next('connack')).returnCode, ConnackCode.SERVER_UNAVAILABLE);
    await v4.waitClosed();
    // A real v5 client reports the refusal and exits non-zero.
    const mos = await run('mosquitto_pub', ['-V', 'mqttv5', '-h', '127.0.0.1', '-p', String(b.port), '-t', 'x', '-m', 'y']);
    assert.notEqual(mos.code, 0);
    assert.match(mos.stderr, /quota exceeded/i);

    first.send({ type: 'disconnect' });
    await first.waitClosed();
    await until(() => b.listener.connections() === 0, 'the first connection to be gone');
    const later = await raw(b, 'later');
    assert.equal((await later.next('connack')).returnCode, 0);
    later.destroy();
  });
});

describe('mqtt limits: keep-alive, response information, session expiry on DISCONNECT', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({ maxKeepalive: 1, tickMs: 50, sysIntervalMs: 0 });
  });
  after(() => b.close());

  test('Server Keep Alive replaces a larger or zero keep-alive [MQTT-3.2.2-21]; a smaller one stands', async () => {
    const js = mqtt.connect(b.url, { protocolVersion: 5, reconnectPeriod: 0, keepalive: 60 });
    const connack = await new Promise<IConnackPacket>((resolve, reject) => {
      js.once('connect', resolve);
      js.once('error', reject);
    });
    assert.equal(connack.properties?.serverKeepAlive, 1);
    await js.endAsync(true);

    const zero = await raw(b, 'ka-zero', { protocolLevel: 5, keepalive: 0, properties: {} });
    assert.equal((await zero.next('connack')).properties?.serverKeepAlive, 1);
    const small = await raw(b, 'ka-small', { protocolLevel: 5, keepalive: 1, properties: {} });
    assert.equal((await small.next('connack')).properties?.serverKeepAlive, undefined);
    zero.destroy();
    small.destroy();
  });

  test('v5 keep-alive timeout: a silent client gets DISCONNECT 0x8D after 1.5 x the Server Keep Alive, its will goes out', async () => {
    const watcher = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0, keepalive: 1 });
    const wills: string[] = [];
    watcher.on('message', (t, p) => wills.push(`${t} ${p.toString()}`));
    await watcher.subscribeAsync('ka/will', { qos: 1 });
    const t0 = Date.now();
    // Asks for 60 s, is told 1 s, then sends nothing.
    const silent = await raw(b, 'ka-silent', {
      protocolLevel: 5,
      keepalive: 60,
      properties: {},
      will: { topic: 'ka/will', payload: Buffer.from('gone quiet'), qos: 1, retain: false, properties: {} },
    });
    assert.equal((await silent.next('connack')).properties?.serverKeepAlive, 1);
    const d = await silent.next('disconnect', 4000);
    assert.equal(d.reasonCode, ReasonCode.KEEP_ALIVE_TIMEOUT);
    assert.ok(Date.now() - t0 >= 1400, `closed after ${Date.now() - t0} ms, not before 1.5 x 1 s`);
    await silent.waitClosed();
    await until(() => wills.length === 1, 'the will');
    assert.deepEqual(wills, ['ka/will gone quiet']);
    await watcher.endAsync();
  });

  test('Request Response Information 1: CONNACK carries Response Information; without it, none', async () => {
    const asked = await raw(b, 'rr-yes', { protocolLevel: 5, keepalive: 1, properties: { requestResponseInformation: 1 } });
    assert.equal((await asked.next('connack')).properties?.responseInformation, 'flowmq/response/rr-yes');
    const not = await raw(b, 'rr-no', { protocolLevel: 5, keepalive: 1, properties: {} });
    assert.equal((await not.next('connack')).properties?.responseInformation, undefined);
    asked.destroy();
    not.destroy();
    // MQTT.js asks for it too.
    const js = mqtt.connect(b.url, { protocolVersion: 5, reconnectPeriod: 0, clientId: 'rr-js', properties: { requestResponseInformation: true } });
    const connack = await new Promise<IConnackPacket>((resolve, reject) => {
      js.once('connect', resolve);
      js.once('error', reject);
    });
    assert.equal(connack.properties?.responseInformation, 'flowmq/response/rr-js');
    await js.endAsync();
  });

  test('DISCONNECT may lengthen or end the session (v5 section 3.14.2.2.2)', async () => {
    // Connected for 1 s of expiry, leaves saying 60 s: still there after the 1 s.
    const longer = await raw(b, 'se-longer', { protocolLevel: 5, cleanSession: false, keepalive: 1, properties: { sessionExpiryInterval: 1 } });
    await longer.next('connack');
    longer.send({ type: 'disconnect', reasonCode: 0, properties: { sessionExpiryInterval: 60 } });
    await longer.waitClosed();
    await sleep(1300);
    const back = await raw(b, 'se-longer', { protocolLevel: 5, cleanSession: false, keepalive: 1, properties: { sessionExpiryInterval: 1 } });
    assert.equal((await back.next('connack')).sessionPresent, true);
    // Now leaves saying 0: the session ends with the connection.
    back.send({ type: 'disconnect', reasonCode: 0, properties: { sessionExpiryInterval: 0 } });
    await back.waitClosed();
    const gone = await raw(b, 'se-longer', { protocolLevel: 5, cleanSession: false, keepalive: 1, properties: { sessionExpiryInterval: 60 } });
    assert.equal((await gone.next('connack')).sessionPresent, false);
    gone.send({ type: 'disconnect', reasonCode: 0, properties: { sessionExpiryInterval: 0 } });
    await gone.waitClosed();
  });

  test('DISCONNECT with a non-zero Session Expiry after CONNECT had 0 is a protocol error: DISCONNECT 0x82, no session kept [MQTT-3.14.2-2]', async () => {
    const watcher = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0, keepalive: 1 });
    const got: string[] = [];
    watcher.on('message', (t) => got.push(t));
    await watcher.subscribeAsync('se/will', { qos: 1 });
    const c = await raw(b, 'se-zero', {
      protocolLevel: 5,
      cleanSession: false,
      keepalive: 1,
      properties: { sessionExpiryInterval: 0 },
      will: { topic: 'se/will', payload: Buffer.from('x'), qos: 1, retain: false, properties: {} },
    });
    await c.next('connack');
    c.send({ type: 'disconnect', reasonCode: 0, properties: { sessionExpiryInterval: 30 } });
    assert.equal((await c.next('disconnect')).reasonCode, ReasonCode.PROTOCOL_ERROR);
    await c.waitClosed();
    // Not a normal disconnect, so the will is published [MQTT-3.1.2-8]; and the session did not outlive it.
    await until(() => got.length === 1, 'the will');
    const again = await raw(b, 'se-zero', { protocolLevel: 5, cleanSession: false, keepalive: 1, properties: { sessionExpiryInterval: 0 } });
    assert.equal((await again.next('connack')).sessionPresent, false);
    again.destroy();
    await watcher.endAsync();
  });
});
