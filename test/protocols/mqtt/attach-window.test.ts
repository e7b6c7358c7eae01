/**
 * A session's subscriptions are live from the moment a connection attaches to it, and the CONNACK follows a
 * moment later (after the attach's promise settles): a message published in between must reach the client after
 * the CONNACK, not be dropped.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import { makeMessage } from '../../../src/core/index.js';
import { MemorySessionStore } from '../../../src/core/index.js';
import { startBroker, until, type TestBroker } from './helpers.js';

describe('mqtt: messages that match a session between attach and CONNACK', () => {
  let b: TestBroker;
  before(async () => {
    b = await startBroker({}, undefined, { sessions: new MemorySessionStore() });
  });
  after(() => b.close());

  for (const version of [4, 5] as const) {
    test(`reach the resuming client after its CONNACK (MQTT ${version === 4 ? '3.1.1' : '5.0'})`, async () => {
      const id = `window-${version}`;
      const persistent = version === 5 ? { clean: false, properties: { sessionExpiryInterval: 300 } } : { clean: false };
      const first = await mqtt.connectAsync(b.url, { protocolVersion: version, reconnectPeriod: 0, clientId: id, ...persistent });
      await first.subscribeAsync(`window/${version}`, { qos: 1 });
      await first.endAsync();

      // Publish exactly in the window: after the hub attached the connection, before the connection is told.
      const hub = b.listener.hub;
      const attach = hub.attach.bind(hub);
      hub.attach = async (...args: Parameters<typeof attach>) => {
        const r = await attach(...args);
        hub.attach = attach;
        b.engine.publish(makeMessage(`window/${version}`, Buffer.from('in the window'), { qos: 1 }));
        return r;
      };
      const got: string[] = [];
      const again: MqttClient = mqtt.connect(b.url, { protocolVersion: version, reconnectPeriod: 0, clientId: id, ...persistent });
      again.on('message', (_t, payload) => got.push(payload.toString()));
      await new Promise<void>((resolve, reject) => {
        again.once('connect', () => resolve());
        again.once('error', reject);
      });
      // A marker published after the window arrives after it: the window's message either came first or never.
      b.engine.publish(makeMessage(`window/${version}`, Buffer.from('marker'), { qos: 1 }));
      await until(() => got.includes('marker'), 'the marker');
      assert.deepEqual(got, ['in the window', 'marker']);
      await again.endAsync();
    });
  }
});
