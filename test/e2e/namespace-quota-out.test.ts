/**
 * The bytes-out quota on a client that only subscribes (issue 29): holding its socket's reading back does not slow
 * it (it sends nothing), so its deliveries are held or dropped as the protocol allows. On a real `flowmq start` with
 * a users file: namespace t1 has `bytesOutRate: 10000`, t2 none (the control).
 * - MQTT (MQTT.js): QoS 0 deliveries past the quota are dropped (at most once); a QoS 1 marker sent after them still
 *   arrives. t2's subscriber gets every one.
 * - NATS core (nats.js): deliveries wait behind the quota as behind a slow link (all arrive, later); a flood that piles
 *   up past max_pending makes the client a slow consumer, closed as nats-server closes one. t2's gets every one.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import { connect as natsConnect, type NatsConnection } from 'nats';
import { eventually, FlowmqProcess } from './harness.js';

const RATE = 10_000;
const PAYLOAD = Buffer.alloc(1000, 0x62);

describe('e2e: the bytes-out quota holds back clients that only subscribe', { timeout: 90_000 }, () => {
  let dir = '';
  let broker: FlowmqProcess;
  const mqtts: MqttClient[] = [];
  const natsConns: NatsConnection[] = [];

  const mq = async (user: 'ann' | 'bob'): Promise<MqttClient> => {
    const m = await mqtt.connectAsync(broker.mqttUrl, { username: user, password: `${user}-pw`, reconnectPeriod: 0, protocolVersion: 5 });
    mqtts.push(m);
    return m;
  };
  const nats = async (user: 'ann' | 'bob'): Promise<NatsConnection> => {
    const nc = await natsConnect({ servers: broker.natsServer, user, pass: `${user}-pw`, reconnect: false });
    natsConns.push(nc);
    return nc;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-quota-out-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        'namespaces:',
        `  - {name: t1, quotas: {bytesOutRate: ${RATE}}}`,
        '  - {name: t2}',
        '',
      ].join('\n'),
    );
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml'), '--nats-max-pending', '262144', '--nats-max-payload', '65536'] });
  });
  after(async () => {
    for (const m of mqtts) m.end(true);
    for (const nc of natsConns) await nc.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** 300 QoS 0 publishes of 1000 bytes to a subscriber of the same namespace, then a QoS 1 marker: what it got. */
  async function mqttFlood(user: 'ann' | 'bob'): Promise<{ got: number; ms: number }> {
    const sub = await mq(user);
    let got = 0;
    let done!: () => void;
    const ended = new Promise<void>((r) => (done = r));
    sub.on('message', (topic) => {
      if (topic === 'end') done();
      else got++;
    });
    await sub.subscribeAsync('load/#', { qos: 0 });
    await sub.subscribeAsync('end', { qos: 1 });
    const pub = await mq(user);
    const start = Date.now();
    for (let i = 0; i < 300; i++) pub.publish('load/x', PAYLOAD, { qos: 0 });
    await pub.publishAsync('end', 'marker', { qos: 1 });
    await Promise.race([ended, new Promise((_, reject) => setTimeout(() => reject(new Error(`${user}: no marker (${got} got)`)), 20_000))]);
    return { got, ms: Date.now() - start };
  }

  test('MQTT: QoS 0 past the quota is dropped; the namespace without one gets everything', async (t) => {
    const free = await mqttFlood('bob');
    assert.equal(free.got, 300, 't2 has no quota: every message');
    const held = await mqttFlood('ann');
    t.diagnostic(`t1 got ${held.got} of 300 QoS 0 messages of 1000 bytes in ${held.ms} ms at ${RATE} B/s`);
    // A second of burst plus the rate over the run, generously.
    const allowed = Math.ceil(((RATE / 1000) * (held.ms + 1000) * 1.5) / 1000);
    assert.ok(held.got > 0 && held.got <= allowed, `t1 got ${held.got} (at most ${allowed})`);
    assert.ok(held.got < 300, 'some were dropped');
  });

  test('NATS: deliveries wait behind the quota, all arrive; t2 gets them at once', async (t) => {
    for (const user of ['bob', 'ann'] as const) {
      const sub = await nats(user);
      const got: number[] = [];
      let lastAt = 0;
      const s = sub.subscribe('slow.>', {
        callback: (_err, m) => {
          if (m.subject === 'slow.end') return;
          got.push(m.data.length);
          lastAt = Date.now();
        },
      });
      await sub.flush();
      const pub = await nats(user);
      const start = Date.now();
      for (let i = 0; i < 50; i++) pub.publish('slow.x', PAYLOAD);
      pub.publish('slow.end', 'marker');
      await pub.flush();
      await eventually(() => got.length === 50, 20_000, `${user}: 50 messages`);
      const ms = lastAt - start;
      t.diagnostic(`${user}: 50 messages of 1000 bytes in ${ms} ms`);
      // 50,000 bytes at 10,000 B/s, a second's burst first: about 4 s for t1; t2 is not held.
      if (user === 'ann') assert.ok(ms >= 2000, `t1 was held back: ${ms} ms`);
      s.unsubscribe();
    }
  });

  test('NATS: a flood past max_pending makes the subscriber a slow consumer (closed); t2 gets it all', async () => {
    for (const user of ['bob', 'ann'] as const) {
      const sub = await nats(user);
      let got = 0;
      let ended = false;
      sub.subscribe('flood.>', {
        callback: (_err, m) => {
          if (m.subject === 'flood.end') ended = true;
          else got++;
        },
      });
      await sub.flush();
      const pub = await nats(user);
      // 2 MB against a quota of 10 kB/s and a max_pending of 256 kB.
      for (let i = 0; i < 2000; i++) pub.publish('flood.x', PAYLOAD);
      pub.publish('flood.end', 'marker');
      await pub.flush();
      if (user === 'bob') {
        await eventually(() => ended, 20_000, 'the marker');
        assert.equal(got, 2000);
      } else {
        const closed = await Promise.race([sub.closed().then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 20_000))]);
        assert.ok(closed, 'the slow consumer was closed');
        assert.ok(!ended && got < 2000, `t1 got ${got} before it was closed`);
        await broker.waitForLog((l) => l.msg === 'Slow Consumer Detected');
      }
    }
  });
});
