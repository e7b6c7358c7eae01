/**
 * MQTT end to end against the real `bin/flowmq` process: persistent sessions and retained messages survive a
 * broker restart in the middle of a session (MQTT.js 3.1.1 and 5.0, mosquitto_sub -c), and the TLS and
 * WebSocket transports carry the same sessions. A broker killed with SIGKILL keeps the in-flight messages of
 * connected persistent sessions (written through to the session store as they are sent). Both run on the
 * embedded storage and on PostgreSQL + S3 (storage-configs.ts), where the sessions live in PostgreSQL.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IClientOptions, type IPublishPacket, type MqttClient } from 'mqtt';
import { FlowmqProcess, eventually, makeTestCert, run, sleep } from './harness.js';
import { RawClient, connectPacket } from '../protocols/mqtt/helpers.js';
import { storageConfigs } from './storage-configs.js';
import type { MqttPacket } from '../../src/protocols/mqtt/codec/index.js';

function collect(c: MqttClient): IPublishPacket[] {
  const got: IPublishPacket[] = [];
  c.on('message', (_t, _p, packet) => got.push(packet));
  return got;
}

/** Connects and resolves with the client and its CONNACK's Session Present; messages are collected from the start. */
async function connectCollect(url: string, opts: IClientOptions): Promise<{ c: MqttClient; got: IPublishPacket[]; present: boolean }> {
  const c = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 5000, ...opts });
  const got = collect(c);
  const present = await new Promise<boolean>((resolve, reject) => {
    c.once('connect', (p) => resolve(p.sessionPresent));
    c.once('error', reject);
  });
  return { c, got, present };
}

const configs = storageConfigs();

for (const cfg of configs)
  describe(`mqtt e2e: restart in the middle of persistent sessions [${cfg.name}]`, () => {
    let b: FlowmqProcess;
    let certDir = '';
    let storageArgs: string[] = [];
    before(async () => {
      // A self-signed certificate for the TLS listener.
      certDir = makeTestCert().dir;
      storageArgs = await cfg.brokerArgs();
      b = await FlowmqProcess.start({
        args: [
          ...storageArgs,
          '--mqtts-port',
          '0',
          '--mqtt-tls-cert',
          join(certDir, 'cert.pem'),
          '--mqtt-tls-key',
          join(certDir, 'key.pem'),
          '--log-level',
          'info',
        ],
      });
    });
    after(async () => {
      await b.stop();
      b.cleanup();
      rmSync(certDir, { recursive: true, force: true });
    });

    test('sessions, queued QoS 1/2 and retained messages survive SIGTERM + restart', async () => {
      const mport = () => String(b.ports.mqtt);
      // Three persistent subscribers: MQTT.js 5.0, MQTT.js 3.1.1 and mosquitto_sub -c; then all go offline.
      const s5 = await connectCollect(b.mqttUrl, { protocolVersion: 5, clientId: 'e2e-v5', clean: false, properties: { sessionExpiryInterval: 3600 } });
      await s5.c.subscribeAsync('plant/+/alarm', { qos: 2 });
      const s4 = await connectCollect(b.mqttUrl, { protocolVersion: 4, clientId: 'e2e-v4', clean: false });
      await s4.c.subscribeAsync('plant/#', { qos: 1 });
      await Promise.all([s5.c.endAsync(), s4.c.endAsync()]);
      const mos = await run('mosquitto_sub', ['-h', '127.0.0.1', '-p', mport(), '-i', 'e2e-mos', '-c', '-q', '1', '-t', 'plant/#', '-E'], {
        timeoutMs: 10_000,
      });
      assert.equal(mos.code, 0, mos.stderr);

      // Published while everyone is offline (mosquitto_pub QoS 1 and 2, MQTT.js), plus a retained message.
      for (const [t, m, q] of [
        ['plant/a/alarm', 'fire', '1'],
        ['plant/b/alarm', 'flood', '2'],
      ]) {
        const r = await run('mosquitto_pub', ['-h', '127.0.0.1', '-p', mport(), '-q', q, '-t', t, '-m', m], { timeoutMs: 10_000 });
        assert.equal(r.code, 0, r.stderr);
      }
      const r = await run('mosquitto_pub', ['-h', '127.0.0.1', '-p', mport(), '-q', '1', '-r', '-t', 'plant/status', '-m', 'running'], { timeoutMs: 10_000 });
      assert.equal(r.code, 0, r.stderr);
      await sleep(100);

      b = await b.restart([
        ...storageArgs,
        '--mqtts-port',
        '0',
        '--mqtt-tls-cert',
        join(certDir, 'cert.pem'),
        '--mqtt-tls-key',
        join(certDir, 'key.pem'),
        '--log-level',
        'info',
      ]);

      const a5 = await connectCollect(b.mqttUrl, { protocolVersion: 5, clientId: 'e2e-v5', clean: false, properties: { sessionExpiryInterval: 3600 } });
      const a4 = await connectCollect(b.mqttUrl, { protocolVersion: 4, clientId: 'e2e-v4', clean: false });
      try {
        assert.equal(a5.present, true, 'v5 session present after restart');
        assert.equal(a4.present, true, '3.1.1 session present after restart');
        await eventually(() => a5.got.length === 2 && a4.got.length === 3, 10_000, 'queued messages after restart');
        assert.deepEqual(
          a5.got.map((p) => p.payload.toString()),
          ['fire', 'flood'],
        );
        assert.deepEqual(
          a5.got.map((p) => p.qos),
          [1, 2],
        );
        assert.deepEqual(
          a4.got.map((p) => p.payload.toString()),
          ['fire', 'flood', 'running'],
        );
        // The subscriptions themselves survived: a new publish reaches both.
        const pub = await mqtt.connectAsync(b.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
        await pub.publishAsync('plant/c/alarm', 'smoke', { qos: 1 });
        await pub.endAsync();
        await eventually(() => a5.got.length === 3 && a4.got.length === 4, 10_000, 'live after restart');
      } finally {
        await Promise.all([a5.c.endAsync(), a4.c.endAsync()]);
      }
      const back = await run(
        'mosquitto_sub',
        ['-h', '127.0.0.1', '-p', String(b.ports.mqtt), '-i', 'e2e-mos', '-c', '-q', '1', '-t', 'plant/#', '-C', '4', '-v'],
        { timeoutMs: 10_000 },
      );
      assert.equal(back.code, 0, back.stderr);
      assert.deepEqual(back.stdout.trim().split('\n'), ['plant/a/alarm fire', 'plant/b/alarm flood', 'plant/status running', 'plant/c/alarm smoke']);
      // The retained message came back from the store, RETAIN set for a new subscriber.
      const ret = await run(
        'mosquitto_sub',
        ['-h', '127.0.0.1', '-p', String(b.ports.mqtt), '-V', 'mqttv5', '-t', 'plant/status', '-C', '1', '--retained-only'],
        { timeoutMs: 10_000 },
      );
      assert.equal(ret.stdout.trim(), 'running');
    });

    test('TLS (mosquitto_pub --cafile, MQTT.js mqtts) and WebSocket (MQTT.js ws:// /mqtt) share one broker', async () => {
      assert.ok(b.ports.mqtts > 0 && b.ports['mqtt-ws'] > 0, JSON.stringify(b.ports));
      const ws = await connectCollect(`ws://127.0.0.1:${b.ports['mqtt-ws']}/mqtt`, { protocolVersion: 5, clientId: 'over-ws' });
      try {
        await ws.c.subscribeAsync('secure/#', { qos: 1 });
        const tlsClient = await mqtt.connectAsync(`mqtts://127.0.0.1:${b.ports.mqtts}`, {
          protocolVersion: 4,
          reconnectPeriod: 0,
          ca: readFileSync(join(certDir, 'cert.pem')),
          servername: 'localhost',
        });
        await tlsClient.publishAsync('secure/js', 'via tls', { qos: 1 });
        await tlsClient.endAsync();
        const r = await run(
          'mosquitto_pub',
          [
            '-h',
            '127.0.0.1',
            '-p',
            String(b.ports.mqtts),
            '--cafile',
            join(certDir, 'cert.pem'),
            '--insecure',
            '-q',
            '1',
            '-t',
            'secure/mos',
            '-m',
            'mosquitto tls',
          ],
          { timeoutMs: 10_000 },
        );
        assert.equal(r.code, 0, r.stderr);
        await eventually(() => ws.got.length === 2, 10_000, 'two messages over WebSocket');
        assert.deepEqual(
          ws.got.map((p) => `${p.topic} ${p.payload.toString()}`),
          ['secure/js via tls', 'secure/mos mosquitto tls'],
        );
        // Takeover across transports: the same client id over TCP closes the WebSocket one.
        const closed = new Promise<void>((resolve) => ws.c.once('close', () => resolve()));
        const tcp = await mqtt.connectAsync(b.mqttUrl, { protocolVersion: 5, clientId: 'over-ws', reconnectPeriod: 0 });
        await closed;
        await tcp.endAsync();
      } finally {
        ws.c.end(true);
      }
    });
  });

// On PostgreSQL this needs the publisher's PUBACK to wait for the write-through of the deliveries to the
// subscribers' session queues (MqttHub.queueWrites): SQLite has written them at call time, PostgreSQL commits
// later, and a kill -9 right after the last PUBLISH used to lose it (m1, m2 came back, m3 did not).
for (const cfg of configs)
  describe(`mqtt e2e: in-flight QoS 1 messages of connected sessions survive kill -9 [${cfg.name}]`, () => {
    let b: FlowmqProcess;
    before(async () => {
      b = await FlowmqProcess.start({ args: await cfg.brokerArgs() });
    });
    after(async () => {
      await b.stop('SIGKILL');
      b.cleanup();
    });

    test('sent but unacknowledged messages come back with DUP and their packet ids (raw v5 client, mosquitto_sub -c)', async () => {
      // A v5 client with a persistent session that receives but never sends PUBACK.
      const raw = await RawClient.open(b.ports.mqtt);
      raw.level = 5;
      raw.send(connectPacket('kill-v5', { protocolLevel: 5, cleanSession: false, properties: { sessionExpiryInterval: 3600 } }));
      assert.equal((await raw.next('connack')).returnCode, 0);
      raw.send({ type: 'subscribe', packetId: 1, subscriptions: [{ filter: 'crash/#', qos: 1 }], properties: {} });
      assert.deepEqual((await raw.next('suback')).returnCodes, [1]);
      // mosquitto_sub -c (3.1.1, Clean Session 0), frozen with SIGSTOP once subscribed: it cannot acknowledge.
      // stdbuf: mosquitto_sub's stdout is block-buffered on a pipe, and we need its debug lines as they happen.
      const mos = spawn('stdbuf', [
        '-oL',
        'mosquitto_sub',
        '-h',
        '127.0.0.1',
        '-p',
        String(b.ports.mqtt),
        '-i',
        'kill-mos',
        '-c',
        '-q',
        '1',
        '-t',
        'crash/#',
        '-d',
      ]);
      let mosOut = '';
      let sent: Array<Extract<MqttPacket, { type: 'publish' }>> = [];
      mos.stdout.on('data', (d: Buffer) => (mosOut += d.toString()));
      try {
        await eventually(() => mosOut.includes('received SUBACK'), 10_000, 'mosquitto_sub subscribed');
        mos.kill('SIGSTOP');

        const pub = await mqtt.connectAsync(b.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
        for (const m of ['m1', 'm2', 'm3']) await pub.publishAsync(`crash/${m}`, m, { qos: 1 });
        await pub.endAsync();
        await eventually(() => raw.packets.filter((p) => p.type === 'publish').length === 3, 10_000, 'three PUBLISH at the raw client');
        sent = raw.packets.filter((p): p is Extract<MqttPacket, { type: 'publish' }> => p.type === 'publish');
        assert.deepEqual(
          sent.map((p) => [p.payload.toString(), p.dup]),
          [
            ['m1', false],
            ['m2', false],
            ['m3', false],
          ],
        );

        // No PUBACK went back from either client. The broker dies without any chance to write anything.
        await b.stop('SIGKILL');
      } finally {
        mos.kill('SIGKILL');
        raw.destroy();
      }
      b = await FlowmqProcess.start({ dataDir: b.dataDir, args: b.args });

      // [MQTT-4.4.0-1] on resume (Clean Start 0) unacknowledged PUBLISH packets are re-sent with DUP 1 and their
      // original packet identifiers [MQTT-3.3.1-1], before anything newer.
      const back = await connectCollect(b.mqttUrl, { protocolVersion: 5, clientId: 'kill-v5', clean: false, properties: { sessionExpiryInterval: 3600 } });
      assert.equal(back.present, true);
      await eventually(() => back.got.length === 3, 10_000, 'the three messages again');
      assert.deepEqual(
        back.got.map((p) => [p.payload.toString(), p.dup, p.messageId]),
        sent.map((p) => [p.payload.toString(), true, p.packetId]),
      );
      await back.c.endAsync();

      const mosBack = await run(
        'mosquitto_sub',
        ['-h', '127.0.0.1', '-p', String(b.ports.mqtt), '-i', 'kill-mos', '-c', '-q', '1', '-t', 'crash/#', '-C', '3', '-d'],
        { timeoutMs: 10_000 },
      );
      assert.equal(mosBack.code, 0, mosBack.stderr);
      const pubs = [...mosBack.stdout.matchAll(/received PUBLISH \(d(\d), q1, r0, m\d+, 'crash\/(m\d)'/g)].map((m) => `${m[2]} d${m[1]}`);
      assert.deepEqual(pubs, ['m1 d1', 'm2 d1', 'm3 d1']);

      // mosquitto_sub -C queues its DISCONNECT from inside the callback of the last message, and the socket can
      // close before all of its PUBACKs went out (seen: the broker got PUBACK 1 and 2, or only 1, then DISCONNECT).
      // What the broker never received stays stored and is redelivered, as it must be; an MQTT.js session acks
      // those now, so that everything is acknowledged before the next kill.
      const rest = await connectCollect(b.mqttUrl, { protocolVersion: 4, clientId: 'kill-mos', clean: false });
      await sleep(300);
      assert.ok(
        rest.got.every((p) => p.dup && pubs.includes(`${p.topic.slice('crash/'.length)} d1`)),
        `only messages mosquitto_sub had received come again: ${rest.got.map((p) => p.topic).join(', ')}`,
      );
      await rest.c.endAsync();
      // A new client's CONNECT/CONNACK round trip comes after the broker has read what was already waiting (the
      // PUBACKs above), so this is the moment to kill it.
      const probe = await mqtt.connectAsync(b.mqttUrl, { reconnectPeriod: 0 });
      await probe.endAsync();

      // Acknowledged now, so gone from the store: another kill -9 and resume brings nothing back.
      await b.stop('SIGKILL');
      b = await FlowmqProcess.start({ dataDir: b.dataDir, args: b.args });
      const again = await connectCollect(b.mqttUrl, { protocolVersion: 5, clientId: 'kill-v5', clean: false, properties: { sessionExpiryInterval: 3600 } });
      assert.equal(again.present, true);
      const mosAgain = await run(
        'mosquitto_sub',
        ['-h', '127.0.0.1', '-p', String(b.ports.mqtt), '-i', 'kill-mos', '-c', '-q', '1', '-t', 'crash/#', '-W', '1', '-v'],
        { timeoutMs: 10_000 },
      );
      assert.equal(mosAgain.stdout, '');
      assert.deepEqual(again.got, []);
      await again.c.endAsync();
    });
  });
