/**
 * MQTT `$SYS` per tenant (issue 29, docs/namespaces.md): the broker's `$SYS/broker/...` figures are published in
 * `default` only. MQTT.js clients of three namespaces (root in `default`, ann in t1, bob in t2) subscribe to `$SYS/#`;
 * ann also through a shared subscription `$share/g/$SYS/#`; the broker publishes its figures every 200 ms. root gets them (retained at once, then live); ann gets none of them,
 * nor bob's own `$SYS/...` publish in t2, proved by a marker ann publishes after root saw a fresh round and bob's
 * publish arrived at bob.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import mqtt, { type MqttClient } from 'mqtt';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { eventually } from './harness.js';

describe('e2e: a tenant sees no $SYS figures of the broker nor of other tenants', { timeout: 60_000 }, () => {
  let dir = '';
  let broker: Broker;
  let mqttUrl = '';
  let adminApi = '';
  const clients: MqttClient[] = [];

  const http = async (method: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Basic ${Buffer.from('root:root-pw').toString('base64')}` };
    if (method !== 'GET') headers['content-type'] = 'application/json';
    const r = await fetch(adminApi + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return r.status;
  };
  /**
   * A client of `user` subscribed to `$SYS/#` (and `marker`; `shared`: also `$share/g/$SYS/#`), recording every topic
   * it receives.
   */
  const watcher = async (user: string, shared = false) => {
    const c = await mqtt.connectAsync(mqttUrl, { username: user, password: `${user}-pw`, reconnectPeriod: 0, protocolVersion: 5 });
    clients.push(c);
    const seen: string[] = [];
    c.on('message', (topic) => seen.push(topic));
    await c.subscribeAsync(['$SYS/#', 'marker', ...(shared ? ['$share/g/$SYS/#'] : [])], { qos: 1 });
    return { c, seen };
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-sys-'));
    writeFileSync(join(dir, 'users.yaml'), ['users:', '  - {username: root, password: root-pw, groups: [admins]}', ''].join('\n'));
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'mqtt',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'mqtt-sys-interval': '200ms',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    mqttUrl = `mqtt://127.0.0.1:${broker.listeners.get('mqtt')!.address().port}`;
    adminApi = `http://127.0.0.1:${broker.ports().http}`;
    for (const [ns, user] of [
      ['t1', 'ann'],
      ['t2', 'bob'],
    ]) {
      assert.equal(await http('POST', '/api/v1/namespaces', { name: ns }), 201);
      assert.equal(await http('POST', '/api/v1/users', { username: user, password: `${user}-pw`, namespace: ns }), 201);
    }
  });

  after(async () => {
    for (const c of clients) await c.endAsync(true).catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("$SYS/# of a tenant gets nothing of the broker's figures or of another tenant's $SYS topics", async () => {
    const ann = await watcher('ann', true);
    const root = await watcher('root');
    const bob = await watcher('bob');
    // Every figure root sees from here on was published after ann subscribed.
    const from = root.seen.length;
    await eventually(() => root.seen.slice(from).includes('$SYS/broker/uptime'), 10_000, `root: ${JSON.stringify(root.seen)}`);
    for (const t of ['$SYS/broker/version', '$SYS/broker/clients/connected', '$SYS/broker/messages/received']) {
      assert.ok(root.seen.includes(t), `root gets ${t}: ${JSON.stringify(root.seen)}`);
    }
    // A tenant's own `$SYS/...` topic is its namespace's: bob gets it back, ann and root do not.
    await bob.c.publishAsync('$SYS/broker/uptime', 'bob-fake', { qos: 1, retain: true });
    await eventually(() => bob.seen.includes('$SYS/broker/uptime'), 5_000, `bob: ${JSON.stringify(bob.seen)}`);
    assert.ok(
      bob.seen.every((t) => t === '$SYS/broker/uptime'),
      `bob gets only its own $SYS topic: ${JSON.stringify(bob.seen)}`,
    );
    await ann.c.publishAsync('marker', 'm', { qos: 1 });
    await eventually(() => ann.seen.includes('marker'), 5_000, `ann: ${JSON.stringify(ann.seen)}`);
    assert.deepEqual(ann.seen, ['marker'], 'ann: nothing before its marker');
    // A new tenant subscriber gets no retained figure either: only its own namespace's retained topics.
    const late = await watcher('ann');
    await late.c.publishAsync('marker', 'm2', { qos: 1 });
    await eventually(() => late.seen.includes('marker'), 5_000, `late ann: ${JSON.stringify(late.seen)}`);
    assert.deepEqual(late.seen, ['marker']);
    const lateBob = await watcher('bob');
    await lateBob.c.publishAsync('marker', 'm3', { qos: 1 });
    await eventually(() => lateBob.seen.includes('marker'), 5_000, `late bob: ${JSON.stringify(lateBob.seen)}`);
    assert.deepEqual(lateBob.seen, ['$SYS/broker/uptime', 'marker'], "bob's own retained $SYS topic, no figure");
  });
});
