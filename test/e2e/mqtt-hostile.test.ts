/**
 * The MQTT hardening options through the real `bin/flowmq`: a half-sent PUBLISH closed by
 * `--mqtt-packet-timeout`, a subscriber that never acknowledges overflowing `--mqtt-max-queued-messages`
 * (dropped, not delivered, in `GET /api/v1/broker`), `--mqtt-slow-consumer disconnect`, and the real log output
 * of "mqtt client connected" (one `level` key).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt from 'mqtt';
import { encodePublishFrame } from '../../src/protocols/mqtt/codec/index.js';
import { RawClient } from '../protocols/mqtt/helpers.js';
import { FlowmqProcess, eventually } from './harness.js';

interface BrokerInfo {
  stats: { delivered: number; dropped: number };
  mqtt: {
    dropped: Record<string, number>;
    packetTimeouts: number;
    partialBytes: number;
    slowConsumerPolicy: string;
    slowConsumerDisconnects: number;
  };
}

describe('e2e: MQTT hostile clients (drop policy)', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({
      args: ['--mqtt-max-inflight', '5', '--mqtt-max-queued-messages', '10', '--mqtt-packet-timeout', '500ms', '--log-level', 'debug'],
    });
  });
  after(async () => {
    await broker?.stop();
  });

  test('a half-sent PUBLISH with keep-alive 0 is closed by --mqtt-packet-timeout', async () => {
    const c = await RawClient.connect(broker.ports.mqtt, 'half', { keepalive: 0 });
    c.send(encodePublishFrame('half/x', Buffer.alloc(500_000), 0, false, false, 0).subarray(0, 10_000));
    await c.waitClosed(15_000);
    const info = await broker.api<BrokerInfo>('GET', '/api/v1/broker');
    assert.equal(info.mqtt.packetTimeouts, 1);
    assert.equal(info.mqtt.partialBytes, 0);
  });

  test('a subscriber that never acknowledges: the overflow is dropped, not delivered, in GET /api/v1/broker', async () => {
    const slow = await RawClient.connect(broker.ports.mqtt, 'never-acks');
    slow.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'e2e-slow/#', qos: 1 }] });
    await slow.next('suback');
    const pub = await mqtt.connectAsync(broker.mqttUrl, { reconnectPeriod: 0 });
    for (let i = 0; i < 30; i++) await pub.publishAsync('e2e-slow/x', `m${i}`, { qos: 1 });
    await pub.endAsync();
    const info = await broker.api<BrokerInfo>('GET', '/api/v1/broker');
    assert.equal(info.mqtt.slowConsumerPolicy, 'drop');
    assert.equal(info.mqtt.dropped.queueFull, 15);
    assert.equal(info.stats.dropped, 15);
    assert.equal(info.stats.delivered, 15, '5 in flight and 10 queued; the 15 dropped are not delivered');
    slow.destroy();
  });

  test('the real log line "mqtt client connected" has one level key and the protocol version', async () => {
    const c = await mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, clientId: 'e2e-logged' });
    const line = await broker.waitForLog((l) => l.msg === 'mqtt client connected' && l.clientId === 'e2e-logged');
    await c.endAsync();
    assert.equal(line.level, 20);
    assert.equal(line.protocolVersion, 5);
  });
});

describe('e2e: MQTT --mqtt-slow-consumer disconnect', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--mqtt-slow-consumer', 'disconnect', '--mqtt-max-inflight', '2', '--mqtt-max-queued-messages', '3'] });
  });
  after(async () => {
    await broker?.stop();
  });

  test('a subscriber that never acknowledges is disconnected once its queue is full', async () => {
    const slow = await RawClient.connect(broker.ports.mqtt, 'never-acks');
    slow.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'e2e-sc/#', qos: 1 }] });
    await slow.next('suback');
    const pub = await mqtt.connectAsync(broker.mqttUrl, { reconnectPeriod: 0 });
    for (let i = 0; i < 6; i++) await pub.publishAsync('e2e-sc/x', `m${i}`, { qos: 1 });
    await pub.endAsync();
    await slow.waitClosed();
    await eventually(async () => (await broker.api<BrokerInfo>('GET', '/api/v1/broker')).mqtt.slowConsumerDisconnects === 1, 5000, 'the disconnect counted');
    const info = await broker.api<BrokerInfo>('GET', '/api/v1/broker');
    assert.equal(info.mqtt.slowConsumerPolicy, 'disconnect');
    // A clean session: the three queued and the sixth end with it.
    assert.equal(info.mqtt.dropped.closed, 4);
  });
});
