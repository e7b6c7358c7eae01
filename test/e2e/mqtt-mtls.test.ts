/**
 * MQTT over TLS with client certificates (mTLS) against bin/flowmq: `--tls-client-ca` makes the mqtts listener ask
 * for a certificate, and a verified one logs the client in as the directory user its CN names (src/control/certs.ts).
 * MQTT.js and mosquitto_pub, with a throwaway CA from the harness; the user's policies prove who the client is.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IClientOptions } from 'mqtt';
import { FlowmqProcess, makeTestCa, makeTestCert, run, type TestCa, type TestCert } from './harness.js';

describe('e2e: MQTT client certificates (mTLS)', () => {
  let broker: FlowmqProcess;
  let dir: string;
  let ca: TestCa;
  let server: TestCert;
  let device: TestCert;
  let ghost: TestCert;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-mqtt-mtls-'));
    ca = makeTestCa();
    server = makeTestCert();
    device = ca.issue({ cn: 'device-1' });
    ghost = ca.issue({ cn: 'ghost' });
    const users = join(dir, 'users.yaml');
    writeFileSync(
      users,
      [
        'users:',
        '  - {username: device-1, password: unused-pw}',
        '  - {username: alice, password: alice-pw}',
        'policies:',
        '  - {name: device-d, effect: allow, actions: [publish], resources: ["topic:d/device-1/#"], principals: ["user:device-1"]}',
        '  - {name: alice-all, effect: allow, actions: [publish], resources: ["topic:#"], principals: ["user:alice"]}',
        '',
      ].join('\n'),
    );
    broker = await FlowmqProcess.start({
      args: [
        '--protocols',
        'mqtt',
        '--users-file',
        users,
        '--mqtt-tls-cert',
        server.certPath,
        '--mqtt-tls-key',
        server.keyPath,
        '--mqtts-port',
        '0',
        '--tls-client-ca',
        ca.certPath,
      ],
    });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    for (const d of [dir, ca?.dir, server?.dir]) if (d) rmSync(d, { recursive: true, force: true });
  });

  const url = () => `mqtts://127.0.0.1:${broker.ports.mqtts}`;
  const tlsOpts = (c?: TestCert): IClientOptions => ({
    ca: server.cert,
    ...(c ? { cert: c.cert, key: readKey(c) } : {}),
    rejectUnauthorized: true,
    servername: 'localhost',
  });

  test('a certificate signed by the CA logs in as the user its CN names (its policies apply)', async () => {
    const c = await mqtt.connectAsync(url(), { protocolVersion: 5, reconnectPeriod: 0, ...tlsOpts(device) });
    try {
      await c.publishAsync('d/device-1/temp', '21.5', { qos: 1 });
      await assert.rejects(c.publishAsync('d/device-2/temp', 'x', { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
    } finally {
      await c.endAsync();
    }
  });

  test('credentials sent with a certificate win', async () => {
    const c = await mqtt.connectAsync(url(), { protocolVersion: 5, reconnectPeriod: 0, ...tlsOpts(device), username: 'alice', password: 'alice-pw' });
    try {
      await c.publishAsync('d/device-2/temp', 'as alice', { qos: 1 });
    } finally {
      await c.endAsync();
    }
    await assert.rejects(
      mqtt.connectAsync(url(), { protocolVersion: 5, reconnectPeriod: 0, ...tlsOpts(device), username: 'alice', password: 'wrong' }),
      (err: { code?: number }) => err.code === 0x86,
    );
  });

  test('a certificate naming no user is refused like a wrong password; no certificate and no credentials: not authorized', async () => {
    await assert.rejects(
      mqtt.connectAsync(url(), { protocolVersion: 5, reconnectPeriod: 0, ...tlsOpts(ghost) }),
      (err: { code?: number }) => err.code === 0x86,
    );
    await assert.rejects(mqtt.connectAsync(url(), { protocolVersion: 4, reconnectPeriod: 0, ...tlsOpts(ghost) }), (err: { code?: number }) => err.code === 4);
    await assert.rejects(mqtt.connectAsync(url(), { protocolVersion: 5, reconnectPeriod: 0, ...tlsOpts() }), (err: { code?: number }) => err.code === 0x87);
  });

  test('mosquitto_pub with --cert/--key', async () => {
    const base = [
      '-h',
      'localhost',
      '-p',
      String(broker.ports.mqtts),
      '--cafile',
      server.certPath,
      '--cert',
      device.certPath,
      '--key',
      device.keyPath,
      '-V',
      'mqttv5',
      '-q',
      '1',
    ];
    const ok = await run('mosquitto_pub', [...base, '-t', 'd/device-1/x', '-m', 'hi']);
    assert.equal(ok.code, 0, ok.stderr);
    const denied = await run('mosquitto_pub', [...base, '-t', 'elsewhere', '-m', 'hi']);
    assert.match(denied.stderr, /Publish 1 failed: Not authorized/);
  });
});

function readKey(c: TestCert): string {
  return readFileSync(c.keyPath, 'utf8');
}
