/**
 * MQTT end to end against the real `bin/flowmq` process: persistent sessions and retained messages survive a
 * broker restart in the middle of a session (MQTT.js 3.1.1 and 5.0, mosquitto_sub -c), and the TLS and
 * WebSocket transports carry the same sessions.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IClientOptions, type IPublishPacket, type MqttClient } from 'mqtt';
import { FlowmqProcess, eventually, run, sleep } from './harness.js';

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

describe('mqtt e2e: restart in the middle of persistent sessions', () => {
  let b: FlowmqProcess;
  let certDir = '';
  before(async () => {
    // A self-signed certificate for the TLS listener (node:crypto cannot make X.509; openssl can).
    certDir = mkdtempSync(join(tmpdir(), 'flowmq-tls-'));
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
      '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem'),
    ], { stdio: 'ignore' });
    b = await FlowmqProcess.start({
      args: ['--mqtts-port', '0', '--mqtt-tls-cert', join(certDir, 'cert.pem'), '--mqtt-tls-key', join(certDir, 'key.pem'), '--log-level', 'info'],
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
    const mos = await run('mosquitto_sub', ['-h', '127.0.0.1', '-p', mport(), '-i', 'e2e-mos', '-c', '-q', '1', '-t', 'plant/#', '-E'], { timeoutMs: 10_000 });
    assert.equal(mos.code, 0, mos.stderr);

    // Published while everyone is offline (mosquitto_pub QoS 1 and 2, MQTT.js), plus a retained message.
    for (const [t, m, q] of [['plant/a/alarm', 'fire', '1'], ['plant/b/alarm', 'flood', '2']]) {
      const r = await run('mosquitto_pub', ['-h', '127.0.0.1', '-p', mport(), '-q', q, '-t', t, '-m', m], { timeoutMs: 10_000 });
      assert.equal(r.code, 0, r.stderr);
    }
    const r = await run('mosquitto_pub', ['-h', '127.0.0.1', '-p', mport(), '-q', '1', '-r', '-t', 'plant/status', '-m', 'running'], { timeoutMs: 10_000 });
    assert.equal(r.code, 0, r.stderr);
    await sleep(100);

    b = await b.restart([
      '--mqtts-port', '0', '--mqtt-tls-cert', join(certDir, 'cert.pem'), '--mqtt-tls-key', join(certDir, 'key.pem'), '--log-level', 'info',
    ]);

    const a5 = await connectCollect(b.mqttUrl, { protocolVersion: 5, clientId: 'e2e-v5', clean: false, properties: { sessionExpiryInterval: 3600 } });
    const a4 = await connectCollect(b.mqttUrl, { protocolVersion: 4, clientId: 'e2e-v4', clean: false });
    try {
      assert.equal(a5.present, true, 'v5 session present after restart');
      assert.equal(a4.present, true, '3.1.1 session present after restart');
      await eventually(() => a5.got.length === 2 && a4.got.length === 3, 10_000, 'queued messages after restart');
      assert.deepEqual(a5.got.map((p) => p.payload.toString()), ['fire', 'flood']);
      assert.deepEqual(a5.got.map((p) => p.qos), [1, 2]);
      assert.deepEqual(a4.got.map((p) => p.payload.toString()), ['fire', 'flood', 'running']);
      // The subscriptions themselves survived: a new publish reaches both.
      const pub = await mqtt.connectAsync(b.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 });
      await pub.publishAsync('plant/c/alarm', 'smoke', { qos: 1 });
      await pub.endAsync();
      await eventually(() => a5.got.length === 3 && a4.got.length === 4, 10_000, 'live after restart');
    } finally {
      await Promise.all([a5.c.endAsync(), a4.c.endAsync()]);
    }
    const back = await run('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(b.ports.mqtt), '-i', 'e2e-mos', '-c', '-q', '1', '-t', 'plant/#', '-C', '4', '-v'], { timeoutMs: 10_000 });
    assert.equal(back.code, 0, back.stderr);
    assert.deepEqual(back.stdout.trim().split('\n'), ['plant/a/alarm fire', 'plant/b/alarm flood', 'plant/status running', 'plant/c/alarm smoke']);
    // The retained message came back from the store, RETAIN set for a new subscriber.
    const ret = await run('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(b.ports.mqtt), '-V', 'mqttv5', '-t', 'plant/status', '-C', '1', '--retained-only'], { timeoutMs: 10_000 });
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
        ca: execFileSync('cat', [join(certDir, 'cert.pem')]),
        servername: 'localhost',
      });
      await tlsClient.publishAsync('secure/js', 'via tls', { qos: 1 });
      await tlsClient.endAsync();
      const r = await run('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(b.ports.mqtts), '--cafile', join(certDir, 'cert.pem'), '--insecure', '-q', '1', '-t', 'secure/mos', '-m', 'mosquitto tls'], { timeoutMs: 10_000 });
      assert.equal(r.code, 0, r.stderr);
      await eventually(() => ws.got.length === 2, 10_000, 'two messages over WebSocket');
      assert.deepEqual(ws.got.map((p) => `${p.topic} ${p.payload.toString()}`), ['secure/js via tls', 'secure/mos mosquitto tls']);
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
