/**
 * MQTT authentication and authorization end to end, with real clients: mosquitto_pub/mosquitto_sub (libmosquitto,
 * MQTT 3.1.1 and 5) and MQTT.js.
 *
 * The first part runs `bin/flowmq` with a users file that seeds users, a namespace with a connection quota and
 * policies (the wrong password, anonymous refused, unauthorized publish and subscribe, the quota). The live parts
 * run the whole broker in this process (src/broker.ts startBroker with the config table, as bin/flowmq does) so
 * that policies, namespaces and kicks can be changed through `broker.access` while clients are connected.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type IPublishPacket, type MqttClient } from 'mqtt';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { FlowmqProcess, eventually, run } from './harness.js';

const payloads = (got: IPublishPacket[]) => got.map((p) => p.payload.toString());

function collect(c: MqttClient): IPublishPacket[] {
  const got: IPublishPacket[] = [];
  c.on('message', (_t, _p, packet) => got.push(packet));
  return got;
}

describe('e2e: MQTT authentication against bin/flowmq with a users file', () => {
  let broker: FlowmqProcess;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-mqtt-auth-'));
    const users = join(dir, 'users.yaml');
    writeFileSync(
      users,
      [
        'users:',
        '  - {username: alice, password: alice-pw}',
        '  - {username: root, password: root-pw, groups: [admins]}',
        '  - {username: solo, password: solo-pw, namespace: one}',
        'namespaces:',
        '  - {name: one, quotas: {maxConnections: 1}}',
        'policies:',
        '  - {name: alice-a, effect: allow, actions: [publish, subscribe], resources: ["topic:a/#"], principals: ["user:alice"]}',
        '  - {name: solo-s, effect: allow, actions: [publish, subscribe], resources: ["topic:s/#"], principals: ["user:solo"]}',
        '',
      ].join('\n'),
    );
    broker = await FlowmqProcess.start({ args: ['--users-file', users, '--protocols', 'mqtt'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  test('mosquitto_pub with a wrong password is refused: 3.1.1 CONNACK 4, v5 0x86', async () => {
    const port = String(broker.ports.mqtt);
    const v4 = await run('mosquitto_pub', ['-V', 'mqttv311', '-p', port, '-u', 'alice', '-P', 'nope', '-t', 'a/x', '-m', 'hi', '-q', '1']);
    assert.match(v4.stderr, /bad user name or password/i);
    assert.notEqual(v4.code, 0);
    const v5 = await run('mosquitto_pub', ['-V', 'mqttv5', '-p', port, '-u', 'alice', '-P', 'nope', '-t', 'a/x', '-m', 'hi', '-q', '1']);
    assert.match(v5.stderr, /Bad User Name or Password/);
    // mosquitto_pub exits with the CONNACK's reason code on a v5 refusal.
    assert.equal(v5.code, 0x86);
    const ok = await run('mosquitto_pub', ['-V', 'mqttv5', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'a/x', '-m', 'hi', '-q', '1']);
    assert.equal(ok.code, 0, ok.stderr);
  });

  test('MQTT.js: a wrong password and no credentials are refused; the right password connects', async () => {
    await assert.rejects(
      mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'alice', password: 'nope' }),
      (err: { code?: number }) => err.code === 0x86,
    );
    await assert.rejects(
      mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 4, reconnectPeriod: 0, username: 'alice', password: 'nope' }),
      (err: { code?: number }) => err.code === 4,
    );
    // A users file turns anonymous access off by default.
    await assert.rejects(mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0 }), (err: { code?: number }) => err.code === 0x87);
    const c = await mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'alice', password: 'alice-pw' });
    await c.publishAsync('a/x', 'ok', { qos: 1 });
    await c.endAsync();
  });

  test('policies from the users file: mosquitto_pub refused (v5) or dropped (3.1.1), mosquitto_sub refused', async () => {
    const port = String(broker.ports.mqtt);
    const watcher = await mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'root', password: 'root-pw' });
    const got = collect(watcher);
    await watcher.subscribeAsync('#', { qos: 1 });
    try {
      const v5 = await run('mosquitto_pub', ['-V', 'mqttv5', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'b/x', '-m', 'v5-denied', '-q', '1']);
      assert.match(v5.stderr, /Publish 1 failed: Not authorized/);
      const v4 = await run('mosquitto_pub', ['-V', 'mqttv311', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'b/x', '-m', 'v4-denied', '-q', '2']);
      assert.equal(v4.code, 0, v4.stderr);
      for (const v of ['mqttv5', 'mqttv311']) {
        const r = await run('mosquitto_sub', ['-V', v, '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'b/#', '-C', '1', '-W', '5'], { timeoutMs: 15_000 });
        assert.match(r.stderr, /All subscription requests were denied/, `${v}: ${r.stderr}`);
      }
      const ok = await run('mosquitto_pub', ['-V', 'mqttv311', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'a/x', '-m', 'marker', '-q', '1']);
      assert.equal(ok.code, 0, ok.stderr);
      await eventually(() => payloads(got).includes('marker'), 10_000, 'marker');
      assert.deepEqual(payloads(got), ['marker']);
    } finally {
      await watcher.endAsync();
    }
  });

  test('the namespace connection quota from the users file: CONNACK 0x97', async () => {
    const first = await mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'solo', password: 'solo-pw' });
    try {
      const v5 = await run('mosquitto_pub', [
        '-V',
        'mqttv5',
        '-p',
        String(broker.ports.mqtt),
        '-u',
        'solo',
        '-P',
        'solo-pw',
        '-t',
        's/x',
        '-m',
        'hi',
        '-q',
        '1',
      ]);
      assert.equal(v5.code, 0x97, v5.stderr);
    } finally {
      await first.endAsync();
    }
  });
});

describe('e2e: MQTT authorization, live policy changes, quotas and kick (the whole broker in process)', () => {
  let broker: Broker;
  let dataDir: string;
  let url: string;
  let port: string;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'flowmq-mqtt-authz-'));
    const flags = {
      'data-dir': dataDir,
      host: '127.0.0.1',
      protocols: 'mqtt',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'http-port': '0',
      'allow-anonymous': 'false',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    port = String(broker.ports().mqtt);
    url = `mqtt://127.0.0.1:${port}`;
    const d = broker.access.directory;
    await d.addUser({ username: 'alice', password: 'alice-pw' });
    await d.addUser({ username: 'root', password: 'root-pw', groups: ['admins'] });
    await d.putPolicy({ name: 'alice-a', effect: 'allow', actions: ['publish', 'subscribe'], resources: ['topic:a/#'], principals: ['user:alice'] });
  });
  after(async () => {
    await broker?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const as = (user: string, version: 4 | 5 = 5, extra: mqtt.IClientOptions = {}) =>
    mqtt.connectAsync(url, { protocolVersion: version, reconnectPeriod: 0, username: user, password: `${user}-pw`, ...extra });

  test('mosquitto_pub: an unauthorized publish is refused (v5 "Not authorized") or dropped (3.1.1); nothing is delivered', async () => {
    const watcher = await as('root');
    const got = collect(watcher);
    await watcher.subscribeAsync('#', { qos: 1 });
    try {
      const v5 = await run('mosquitto_pub', ['-V', 'mqttv5', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'b/x', '-m', 'v5-denied', '-q', '1']);
      assert.match(v5.stderr, /Publish 1 failed: Not authorized/);
      const v4 = await run('mosquitto_pub', ['-V', 'mqttv311', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'b/x', '-m', 'v4-denied', '-q', '1']);
      assert.equal(v4.code, 0, '3.1.1 has no refusal: the PUBACK comes back as usual');
      const ok = await run('mosquitto_pub', ['-V', 'mqttv311', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'a/x', '-m', 'marker', '-q', '1']);
      assert.equal(ok.code, 0, ok.stderr);
      await eventually(() => payloads(got).includes('marker'), 10_000, 'marker');
      assert.deepEqual(payloads(got), ['marker']);
    } finally {
      await watcher.endAsync();
    }
  });

  test('mosquitto_sub: an unauthorized subscription is refused (SUBACK 0x87 / 0x80)', async () => {
    for (const v of ['mqttv5', 'mqttv311']) {
      const r = await run('mosquitto_sub', ['-V', v, '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'b/#', '-C', '1', '-W', '5'], { timeoutMs: 15_000 });
      assert.match(r.stderr, /All subscription requests were denied/, `${v}: ${r.stderr}`);
    }
  });

  test('MQTT.js: a wildcard over a denied topic is filtered, and a policy changed live applies to the open connection', async () => {
    const alice = await as('alice');
    const root = await as('root');
    const got = collect(alice);
    try {
      // Granted: the policy allows a/#; a deny added later covers part of it.
      assert.equal((await alice.subscribeAsync('a/#', { qos: 1 }))[0].qos, 1);
      await alice.publishAsync('a/secret', 'before', { qos: 1 });
      await eventually(() => payloads(got).includes('before'), 10_000, 'before');
      await broker.access.directory.putPolicy({ name: 'no-secret', effect: 'deny', actions: ['*'], resources: ['topic:a/secret'], principals: ['everyone'] });
      await assert.rejects(alice.publishAsync('a/secret', 'refused', { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
      await root.publishAsync('a/secret', 'not-for-alice', { qos: 1 });
      await root.publishAsync('a/open', 'marker', { qos: 1 });
      await eventually(() => payloads(got).includes('marker'), 10_000, 'marker');
      assert.deepEqual(payloads(got), ['before', 'marker']);
      // mosquitto_sub on the denied topic itself: refused now.
      const r = await run('mosquitto_sub', ['-V', 'mqttv5', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-t', 'a/secret', '-C', '1', '-W', '5'], {
        timeoutMs: 15_000,
      });
      assert.match(r.stderr, /All subscription requests were denied/);
    } finally {
      await broker.access.directory.deletePolicy('no-secret');
      await Promise.all([alice.endAsync(), root.endAsync()]);
    }
  });

  test('connection quota: mosquitto_pub gets CONNACK 0x97 (v5) over the namespace limit', async () => {
    const d = broker.access.directory;
    await d.putNamespace({ name: 'tiny', quotas: { maxConnections: 1 } });
    await d.addUser({ username: 'tina', password: 'tina-pw', namespace: 'tiny' });
    await d.putPolicy({ name: 'tina-all', effect: 'allow', actions: ['publish', 'subscribe'], resources: ['topic:t/#'], principals: ['user:tina'] });
    const first = await as('tina');
    try {
      const v5 = await run('mosquitto_pub', ['-V', 'mqttv5', '-p', port, '-u', 'tina', '-P', 'tina-pw', '-t', 't/x', '-m', 'hi', '-q', '1']);
      assert.equal(v5.code, 0x97, v5.stderr);
      assert.match(v5.stderr, /Quota exceeded/i);
      const v4 = await run('mosquitto_pub', ['-V', 'mqttv311', '-p', port, '-u', 'tina', '-P', 'tina-pw', '-t', 't/x', '-m', 'hi', '-q', '1']);
      assert.match(v4.stderr, /unavailable/i);
    } finally {
      await first.endAsync();
    }
    await eventually(() => broker.access.quotas.figures().tiny?.connections === 0, 5000, 'lease released');
    const again = await run('mosquitto_pub', ['-V', 'mqttv5', '-p', port, '-u', 'tina', '-P', 'tina-pw', '-t', 't/x', '-m', 'hi', '-q', '1']);
    assert.equal(again.code, 0, again.stderr);
  });

  test('publish-rate quota: a fast mosquitto_pub is held back (throttled in the quota figures), nothing is lost', async () => {
    const d = broker.access.directory;
    await d.putNamespace({ name: 'metered', quotas: { publishRate: 50 } });
    await d.addUser({ username: 'mia', password: 'mia-pw', namespace: 'metered' });
    await d.putPolicy({ name: 'mia-all', effect: 'allow', actions: ['publish'], resources: ['topic:m/#'], principals: ['user:mia'] });
    // A namespace is a tenant (core namespaces.ts): the watcher is in `metered` too.
    await d.addUser({ username: 'mio', password: 'mio-pw', namespace: 'metered' });
    await d.putPolicy({ name: 'mio-all', effect: 'allow', actions: ['subscribe'], resources: ['topic:m/#'], principals: ['user:mio'] });
    const watcher = await as('mio');
    const got = collect(watcher);
    await watcher.subscribeAsync('m/#', { qos: 1 });
    try {
      // 150 lines, one message each, over one connection: three times the per-second rate.
      const input = Array.from({ length: 150 }, (_, i) => `m${i}`).join('\n') + '\n';
      const r = await run('mosquitto_pub', ['-V', 'mqttv5', '-p', port, '-u', 'mia', '-P', 'mia-pw', '-t', 'm/x', '-q', '1', '-l'], {
        input,
        timeoutMs: 30_000,
      });
      assert.equal(r.code, 0, r.stderr);
      await eventually(() => got.length === 150, 15_000, 'all 150 delivered');
      assert.ok(broker.access.quotas.figures().metered.throttled > 0, 'the namespace was throttled');
    } finally {
      await watcher.endAsync();
    }
  });

  test('DELETE /api/v1/mqtt/sessions/{clientId} ends an offline session held in memory: nothing queued survives', async () => {
    const opts = { clientId: 'doomed', clean: false, properties: { sessionExpiryInterval: 600 } };
    const first = await as('alice', 5, opts);
    await first.subscribeAsync('a/doomed', { qos: 1 });
    await first.endAsync();
    const root = await as('root');
    await root.publishAsync('a/doomed', 'queued', { qos: 1 });
    await root.endAsync();
    const auth = `Basic ${Buffer.from('root:root-pw').toString('base64')}`;
    const res = await fetch(`http://127.0.0.1:${broker.ports().http}/api/v1/mqtt/sessions/doomed`, {
      method: 'DELETE',
      headers: { authorization: auth, 'content-type': 'application/json' },
    });
    assert.equal(res.status, 204, await res.text());
    const again = mqtt.connect(url, { protocolVersion: 5, reconnectPeriod: 0, username: 'alice', password: 'alice-pw', ...opts });
    const got = collect(again);
    const connack = await new Promise<{ sessionPresent: boolean }>((resolve) => again.once('connect', resolve));
    assert.equal(connack.sessionPresent, false);
    await again.publishAsync('a/doomed', 'marker', { qos: 1 });
    await again.subscribeAsync('a/doomed', { qos: 1 });
    await again.publishAsync('a/doomed', 'after', { qos: 1 });
    await eventually(() => payloads(got).includes('after'), 10_000, 'after');
    assert.deepEqual(payloads(got), ['after'], 'neither the queued message nor the old subscription survived');
    await again.endAsync();
  });

  test('kick through the client registry: DISCONNECT 0x98 to an MQTT.js client, mosquitto_sub ends', async () => {
    const c = await as('alice', 5, { clientId: 'to-kick' });
    const reason = new Promise<number | undefined>((resolve) => c.once('disconnect', (p) => resolve(p.reasonCode)));
    const entry = broker.access.clients.list().find((e) => e.clientId === 'to-kick');
    assert.ok(entry);
    assert.equal(entry.user, 'alice');
    assert.ok(broker.access.clients.kick(entry.id));
    assert.equal(await reason, 0x98);
    c.end(true);
    const sub = run('mosquitto_sub', ['-V', 'mqttv5', '-p', port, '-u', 'alice', '-P', 'alice-pw', '-i', 'kick-sub', '-t', 'a/k'], { timeoutMs: 20_000 });
    await eventually(() => broker.access.clients.list().some((e) => e.clientId === 'kick-sub'), 10_000, 'mosquitto_sub registered');
    assert.ok(broker.access.clients.kick(broker.access.clients.list().find((e) => e.clientId === 'kick-sub')!.id));
    const r = await sub;
    assert.equal(r.signal, null, 'ended by the broker, not by the time limit');
  });
});
