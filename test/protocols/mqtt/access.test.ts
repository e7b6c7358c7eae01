/**
 * MQTT under the control plane (opts.access): authentication (passwords, anonymous per protocol, SCRAM-SHA-256/512
 * as v5 enhanced authentication), authorization of publish, subscribe, will and $queue with MQTT's own reason codes,
 * filtered wildcard subscriptions, policies changed live on open connections, namespace quotas, the client registry
 * and kick. MQTT.js (protocol 5 and 4) and a raw client on our codec, against an in-process listener.
 */
import assert from 'node:assert/strict';
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { WebhookAuthenticator } from '../../../src/control/webhook.js';
import mqtt, { type IClientOptions, type IPublishPacket, type MqttClient } from 'mqtt';
import { encodePacket, type MqttPacket } from '../../../src/protocols/mqtt/codec/index.js';
import { startMqttWsListener } from '../../../src/protocols/mqtt/index.js';
import { RawClient, makeAccess, sleep, startBroker, until, type TestBroker } from './helpers.js';

type Ctl = Awaited<ReturnType<typeof makeAccess>>;

function connect(b: TestBroker, version: 4 | 5, opts: IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(b.url, { protocolVersion: version, reconnectPeriod: 0, connectTimeout: 5000, ...opts });
}
function collect(c: MqttClient): IPublishPacket[] {
  const got: IPublishPacket[] = [];
  c.on('message', (_t, _p, packet) => got.push(packet));
  return got;
}
/** The SUBACK's return codes (MQTT.js rejects a SUBSCRIBE with any failure code; the packet comes with the error). */
async function subackCodes(c: MqttClient, subs: Record<string, { qos: 0 | 1 | 2 }>): Promise<number[]> {
  try {
    return (await c.subscribeAsync(subs)).map((g) => g.qos);
  } catch (err) {
    const packet = (err as { packet?: { granted?: number[] } }).packet;
    if (!packet?.granted) throw err;
    return packet.granted;
  }
}
const payloads = (got: IPublishPacket[]) => got.map((p) => p.payload.toString());

/** CONNECT on a raw socket at `level`; answers the client and its CONNACK. */
async function rawConnect(b: TestBroker, level: 4 | 5, clientId: string, init: Partial<Extract<MqttPacket, { type: 'connect' }>> = {}) {
  const c = await RawClient.open(b.port);
  c.level = level;
  c.send(
    encodePacket(
      {
        type: 'connect',
        protocolName: 'MQTT',
        protocolLevel: level,
        cleanSession: true,
        keepalive: 0,
        clientId,
        will: null,
        username: null,
        password: null,
        ...(level === 5 ? { properties: {} } : {}),
        ...init,
      },
      level,
    ),
  );
  const connack = await c.next('connack');
  return { c, connack };
}

/** The client side of SCRAM (RFC 5802) for MQTT.js's handleAuth, written from the RFC for these tests. */
function scramClient(mechanism: 'SCRAM-SHA-256' | 'SCRAM-SHA-512', username: string, password: string) {
  const h = mechanism === 'SCRAM-SHA-256' ? 'sha256' : 'sha512';
  const len = h === 'sha256' ? 32 : 64;
  const cnonce = randomBytes(12).toString('base64');
  const clientFirstBare = `n=${username},r=${cnonce}`;
  let serverSignature = '';
  return {
    first: Buffer.from(`n,,${clientFirstBare}`),
    final(serverFirst: string): Buffer {
      const attrs = Object.fromEntries(serverFirst.split(',').map((kv) => [kv[0], kv.slice(2)]));
      const salted = pbkdf2Sync(password, Buffer.from(attrs.s, 'base64'), Number(attrs.i), len, h);
      const clientKey = createHmac(h, salted).update('Client Key').digest();
      const storedKey = createHash(h).update(clientKey).digest();
      const withoutProof = `c=${Buffer.from('n,,').toString('base64')},r=${attrs.r}`;
      const authMessage = `${clientFirstBare},${serverFirst},${withoutProof}`;
      const sig = createHmac(h, storedKey).update(authMessage).digest();
      const proof = Buffer.alloc(len);
      for (let i = 0; i < len; i++) proof[i] = clientKey[i] ^ sig[i];
      serverSignature = createHmac(h, createHmac(h, salted).update('Server Key').digest()).update(authMessage).digest('base64');
      return Buffer.from(`${withoutProof},p=${proof.toString('base64')}`);
    },
    get expectedServerFinal(): string {
      return `v=${serverSignature}`;
    },
  };
}

/** MQTT.js with enhanced authentication: CONNECT carries client-first, handleAuth answers the server-first. */
async function scramConnect(b: TestBroker, mechanism: 'SCRAM-SHA-256' | 'SCRAM-SHA-512', username: string, password: string) {
  const sc = scramClient(mechanism, username, password);
  const c = mqtt.connect(b.url, {
    protocolVersion: 5,
    reconnectPeriod: 0,
    connectTimeout: 5000,
    properties: { authenticationMethod: mechanism, authenticationData: sc.first },
  });
  c.handleAuth = (packet, cb) => {
    const data = packet.properties?.authenticationData?.toString() ?? '';
    cb(undefined, { cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: mechanism, authenticationData: sc.final(data) } });
  };
  const connack = await new Promise<{ reasonCode?: number; properties?: { authenticationData?: Buffer } }>((resolve, reject) => {
    c.once('connect', (p) => resolve(p));
    c.once('error', (err) => resolve({ reasonCode: (err as { code?: number }).code }));
    c.once('close', () => setTimeout(() => reject(new Error('closed without CONNACK')), 500));
  });
  return { c, connack, sc };
}

describe('mqtt under the control plane', () => {
  let ctl: Ctl;
  let b: TestBroker;
  before(async () => {
    ctl = await makeAccess();
    b = await startBroker({ access: ctl.access, sysIntervalMs: 0 });
    await ctl.directory.addUser({ username: 'alice', password: 'alice-pw' });
    await ctl.directory.addUser({ username: 'bob', password: 'bob-pw' });
    await ctl.directory.addUser({ username: 'root', password: 'root-pw', groups: ['admins'] });
  });
  after(async () => {
    await b.close();
    await ctl.close();
  });

  /** Removes the policies of the authorization tests (back to "no policy: everything allowed" in mode auto). */
  async function noPolicies(): Promise<void> {
    for (const name of ['alice-a', 'no-secret', 'bob-read']) await ctl.directory.deletePolicy(name).catch(() => undefined);
    assert.equal(ctl.directory.policies.size, 0);
  }

  describe('authentication', () => {
    test('a wrong password: v5 CONNACK 0x86, 3.1.1 0x04; an unknown user likewise', async () => {
      const v5 = await rawConnect(b, 5, 'w5', { username: 'alice', password: Buffer.from('nope') });
      assert.equal(v5.connack.returnCode, 0x86);
      await v5.c.waitClosed();
      const v4 = await rawConnect(b, 4, 'w4', { username: 'alice', password: Buffer.from('nope') });
      assert.equal(v4.connack.returnCode, 0x04);
      await v4.c.waitClosed();
      const unknown = await rawConnect(b, 5, 'wu', { username: 'mallory', password: Buffer.from('x') });
      assert.equal(unknown.connack.returnCode, 0x86);
      // MQTT.js surfaces it as a connect error with the reason code.
      await assert.rejects(connect(b, 5, { username: 'alice', password: 'nope' }), (err: { code?: number }) => err.code === 0x86);
    });

    test('no credentials while anonymous access is off: v5 0x87 Not authorized, 3.1.1 0x05', async () => {
      const v5 = await rawConnect(b, 5, 'anon5');
      assert.equal(v5.connack.returnCode, 0x87);
      const v4 = await rawConnect(b, 4, 'anon4');
      assert.equal(v4.connack.returnCode, 0x05);
    });

    test('the right password connects; the client registry knows the user and client id', async () => {
      const c = await connect(b, 5, { username: 'alice', password: 'alice-pw', clientId: 'reg-alice' });
      try {
        const e = ctl.access.clients.list().find((x) => x.clientId === 'reg-alice');
        assert.ok(e, 'registered');
        assert.equal(e.user, 'alice');
        assert.equal(e.namespace, 'default');
        assert.equal(e.reg.protocol, 'mqtt');
        assert.equal(e.reg.listener, 'mqtt');
        await c.publishAsync('reg/x', 'one', { qos: 1 });
        assert.equal(e.messagesIn, 1);
        assert.ok(e.bytesIn > 0);
      } finally {
        await c.endAsync();
      }
      await until(() => !ctl.access.clients.list().some((x) => x.clientId === 'reg-alice'), 'registry entry removed on close');
    });

    for (const mechanism of ['SCRAM-SHA-256', 'SCRAM-SHA-512'] as const) {
      test(`v5 enhanced authentication with ${mechanism}: AUTH 0x18, then CONNACK with the server's final message`, async () => {
        const { c, connack, sc } = await scramConnect(b, mechanism, 'bob', 'bob-pw');
        try {
          assert.equal(connack.reasonCode ?? 0, 0);
          assert.equal(connack.properties?.authenticationData?.toString(), sc.expectedServerFinal);
          const e = ctl.access.clients.list().find((x) => x.clientId === c.options.clientId);
          assert.equal(e?.user, 'bob');
          await c.publishAsync('scram/x', 'ok', { qos: 1 });
        } finally {
          await c.endAsync();
        }
      });
    }

    test('SCRAM with a wrong password: CONNACK 0x87; an unknown method: 0x8C', async () => {
      const bad = await scramConnect(b, 'SCRAM-SHA-256', 'bob', 'not-bob');
      assert.equal(bad.connack.reasonCode, 0x87);
      bad.c.end(true);
      const { connack } = await rawConnect(b, 5, 'm-unknown', { properties: { authenticationMethod: 'KERBEROS' } });
      assert.equal(connack.returnCode, 0x8c);
    });

    test('SCRAM re-authentication (AUTH 0x19) on an open connection', async () => {
      const sc = scramClient('SCRAM-SHA-256', 'bob', 'bob-pw');
      const c = await RawClient.open(b.port);
      c.level = 5;
      const method = 'SCRAM-SHA-256';
      c.send(
        encodePacket(
          {
            type: 'connect',
            protocolName: 'MQTT',
            protocolLevel: 5,
            cleanSession: true,
            keepalive: 0,
            clientId: 'reauth',
            will: null,
            username: null,
            password: null,
            properties: { authenticationMethod: method, authenticationData: sc.first },
          },
          5,
        ),
      );
      let auth = await c.next('auth');
      assert.equal(auth.reasonCode, 0x18);
      c.send(
        encodePacket(
          {
            type: 'auth',
            reasonCode: 0x18,
            properties: { authenticationMethod: method, authenticationData: sc.final(auth.properties!.authenticationData!.toString()) },
          },
          5,
        ),
      );
      const connack = await c.next('connack');
      assert.equal(connack.returnCode, 0);
      // Again, on the open connection.
      const again = scramClient('SCRAM-SHA-256', 'bob', 'bob-pw');
      c.send(encodePacket({ type: 'auth', reasonCode: 0x19, properties: { authenticationMethod: method, authenticationData: again.first } }, 5));
      auth = await c.next('auth');
      assert.equal(auth.reasonCode, 0x18);
      c.send(
        encodePacket(
          {
            type: 'auth',
            reasonCode: 0x18,
            properties: { authenticationMethod: method, authenticationData: again.final(auth.properties!.authenticationData!.toString()) },
          },
          5,
        ),
      );
      auth = await c.next('auth');
      assert.equal(auth.reasonCode, 0x00);
      assert.equal(auth.properties?.authenticationData?.toString(), again.expectedServerFinal);
      // As another user: refused, DISCONNECT 0x87.
      const other = scramClient('SCRAM-SHA-256', 'alice', 'alice-pw');
      c.send(encodePacket({ type: 'auth', reasonCode: 0x19, properties: { authenticationMethod: method, authenticationData: other.first } }, 5));
      auth = await c.next('auth');
      c.send(
        encodePacket(
          {
            type: 'auth',
            reasonCode: 0x18,
            properties: { authenticationMethod: method, authenticationData: other.final(auth.properties!.authenticationData!.toString()) },
          },
          5,
        ),
      );
      const d = await c.next('disconnect');
      assert.equal(d.reasonCode, 0x87);
      await c.waitClosed();
    });
  });

  describe('authorization', () => {
    before(async () => {
      await noPolicies();
      // alice: publish and subscribe under a/ and to the queue q1, except a/secret; bob: subscribe only.
      await ctl.directory.putPolicy({
        name: 'alice-a',
        effect: 'allow',
        actions: ['publish', 'subscribe'],
        resources: ['topic:a/#', 'queue:q1'],
        principals: ['user:alice'],
      });
      await ctl.directory.putPolicy({ name: 'no-secret', effect: 'deny', actions: ['*'], resources: ['topic:a/secret'], principals: ['everyone'] });
      await ctl.directory.putPolicy({ name: 'bob-read', effect: 'allow', actions: ['subscribe'], resources: ['topic:#'], principals: ['user:bob'] });
    });
    after(noPolicies);

    test('a denied publish: v5 PUBACK / PUBREC 0x87 and not delivered; 3.1.1 acknowledged and dropped; QoS 0 dropped', async () => {
      const watcher = await connect(b, 5, { username: 'root', password: 'root-pw' });
      const got = collect(watcher);
      await watcher.subscribeAsync('#', { qos: 1 });
      const a5 = await connect(b, 5, { username: 'alice', password: 'alice-pw' });
      const a4 = await connect(b, 4, { username: 'alice', password: 'alice-pw' });
      const bob = await connect(b, 5, { username: 'bob', password: 'bob-pw' });
      try {
        await assert.rejects(a5.publishAsync('a/secret', 'v5-q1', { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
        await assert.rejects(a5.publishAsync('a/secret', 'v5-q2', { qos: 2 }), (err: { code?: number }) => err.code === 0x87);
        await assert.rejects(bob.publishAsync('b/x', 'bob-q1', { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
        await a5.publishAsync('a/secret', 'v5-q0', { qos: 0 });
        // 3.1.1 has no refusal: the acks come back as usual.
        await a4.publishAsync('a/secret', 'v4-q1', { qos: 1 });
        await a4.publishAsync('a/secret', 'v4-q2', { qos: 2 });
        await a4.publishAsync('b/x', 'v4-b', { qos: 1 });
        // The connection stays usable; the marker (allowed) arrives after everything refused.
        await a5.publishAsync('a/ok', 'marker', { qos: 1 });
        await until(() => got.some((p) => p.payload.toString() === 'marker'), 'marker');
        assert.deepEqual(payloads(got), ['marker']);
        assert.ok(b.listener.hub.stats.publishesDenied >= 6);
      } finally {
        await Promise.all([watcher.endAsync(), a5.endAsync(), a4.endAsync(), bob.endAsync()]);
      }
    });

    test('a denied subscription: v5 SUBACK 0x87, 3.1.1 0x80; other filters of the same SUBSCRIBE granted', async () => {
      const a5 = await connect(b, 5, { username: 'alice', password: 'alice-pw' });
      const a4 = await connect(b, 4, { username: 'alice', password: 'alice-pw' });
      try {
        assert.deepEqual(await subackCodes(a5, { 'b/#': { qos: 1 }, 'a/x': { qos: 1 }, 'a/secret': { qos: 0 } }), [0x87, 1, 0x87]);
        assert.deepEqual(await subackCodes(a4, { 'b/#': { qos: 1 }, 'a/x': { qos: 1 }, '$share/g/b/y': { qos: 1 } }), [0x80, 1, 0x80]);
        // $queue/<name> is the queue resource.
        await b.engine.declareQueue({ name: 'q2', durable: false, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
        assert.deepEqual(await subackCodes(a5, { '$queue/q2': { qos: 1 } }), [0x87]);
        // q1 is alice's: granted QoS 1.
        await b.engine.declareQueue({ name: 'q1', durable: false, exclusiveOwner: null, autoDelete: false, arguments: {}, rawArguments: {} });
        assert.deepEqual(await subackCodes(a5, { '$queue/q1': { qos: 1 } }), [1]);
      } finally {
        await Promise.all([a5.endAsync(), a4.endAsync()]);
      }
    });

    test('a wildcard reaching into a denied topic is granted and filtered: live and retained messages skip it', async () => {
      const root = await connect(b, 5, { username: 'root', password: 'root-pw' });
      await root.publishAsync('a/secret', 'retained-secret', { qos: 1, retain: true });
      await root.publishAsync('a/open', 'retained-open', { qos: 1, retain: true });
      const a = await connect(b, 5, { username: 'alice', password: 'alice-pw' });
      const got = collect(a);
      try {
        const g = await a.subscribeAsync('a/#', { qos: 1 });
        assert.equal(g[0].qos, 1);
        await root.publishAsync('a/secret', 'live-secret', { qos: 1 });
        await root.publishAsync('a/open', 'marker', { qos: 1 });
        await until(() => payloads(got).includes('marker'), 'marker');
        assert.deepEqual(payloads(got), ['retained-open', 'marker']);
      } finally {
        await root.publishAsync('a/secret', '', { qos: 1, retain: true });
        await root.publishAsync('a/open', '', { qos: 1, retain: true });
        await Promise.all([root.endAsync(), a.endAsync()]);
      }
    });

    test('a will to a denied topic refuses the CONNECT: v5 0x87, 3.1.1 0x05', async () => {
      const will = { topic: 'a/secret', payload: Buffer.from('bye'), qos: 0 as const, retain: false };
      const v5 = await rawConnect(b, 5, 'will5', { username: 'alice', password: Buffer.from('alice-pw'), will: { ...will, properties: {} } });
      assert.equal(v5.connack.returnCode, 0x87);
      const v4 = await rawConnect(b, 4, 'will4', { username: 'alice', password: Buffer.from('alice-pw'), will });
      assert.equal(v4.connack.returnCode, 0x05);
      const ok = await rawConnect(b, 4, 'will-ok', { username: 'alice', password: Buffer.from('alice-pw'), will: { ...will, topic: 'a/will' } });
      assert.equal(ok.connack.returnCode, 0);
      ok.c.destroy();
    });

    test('a policy changed live applies to open connections: publish refused, subscription deliveries stop', async () => {
      const a = await connect(b, 5, { username: 'alice', password: 'alice-pw' });
      const root = await connect(b, 5, { username: 'root', password: 'root-pw' });
      const got = collect(a);
      try {
        await a.subscribeAsync('a/live/#', { qos: 1 });
        await a.publishAsync('a/live/x', 'before', { qos: 1 });
        await until(() => payloads(got).includes('before'), 'before');
        await ctl.directory.putPolicy({
          name: 'live-deny',
          effect: 'deny',
          actions: ['publish', 'subscribe'],
          resources: ['topic:a/live/x'],
          principals: ['user:alice'],
        });
        await assert.rejects(a.publishAsync('a/live/x', 'after', { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
        await root.publishAsync('a/live/x', 'root-after', { qos: 1 });
        await root.publishAsync('a/live/y', 'marker', { qos: 1 });
        await until(() => payloads(got).includes('marker'), 'marker');
        assert.deepEqual(payloads(got), ['before', 'marker']);
        // And back: deleting the policy lets it through again, on the same connection.
        await ctl.directory.deletePolicy('live-deny');
        await a.publishAsync('a/live/x', 'again', { qos: 1 });
        await until(() => payloads(got).includes('again'), 'again');
      } finally {
        await Promise.all([a.endAsync(), root.endAsync()]);
      }
    });

    test('a resumed session keeps only the subscriptions its identity may have now', async () => {
      const first = await connect(b, 5, {
        username: 'alice',
        password: 'alice-pw',
        clientId: 'resume-1',
        clean: false,
        properties: { sessionExpiryInterval: 300 },
      });
      await first.subscribeAsync({ 'a/r1': { qos: 1 }, 'a/r2': { qos: 1 } });
      await first.endAsync();
      assert.equal(b.listener.hub.sessions.get('resume-1')?.subs.size, 2);
      await ctl.directory.putPolicy({ name: 'deny-r2', effect: 'deny', actions: ['subscribe'], resources: ['topic:a/r2'], principals: ['everyone'] });
      try {
        const again = await connect(b, 5, {
          username: 'alice',
          password: 'alice-pw',
          clientId: 'resume-1',
          clean: false,
          properties: { sessionExpiryInterval: 0 },
        });
        assert.deepEqual([...b.listener.hub.sessions.get('resume-1')!.subs.keys()], ['a/r1']);
        await again.endAsync();
      } finally {
        await ctl.directory.deletePolicy('deny-r2');
      }
    });
  });

  describe('stored messages of a persistent session', () => {
    test('messages queued while offline are checked again when sent: a policy added meanwhile withholds them', async () => {
      const opts = { username: 'alice', password: 'alice-pw', clientId: 'offline-1', clean: false, properties: { sessionExpiryInterval: 300 } };
      const first = await connect(b, 5, opts);
      await first.subscribeAsync('off/#', { qos: 1 });
      await first.endAsync();
      const root = await connect(b, 5, { username: 'root', password: 'root-pw' });
      await root.publishAsync('off/secret', 'queued-secret', { qos: 1 });
      await root.publishAsync('off/open', 'queued-open', { qos: 1 });
      await root.endAsync();
      // From no policy at all (everything allowed) to: alice may read off/# but off/secret.
      await ctl.directory.putPolicy({ name: 'allow-off', effect: 'allow', actions: ['subscribe'], resources: ['topic:off/#'], principals: ['user:alice'] });
      await ctl.directory.putPolicy({
        name: 'deny-off-secret',
        effect: 'deny',
        actions: ['subscribe'],
        resources: ['topic:off/secret'],
        principals: ['user:alice'],
      });
      const before = b.listener.hub.stats.dropped.notAuthorized;
      try {
        const again = mqtt.connect(b.url, { protocolVersion: 5, reconnectPeriod: 0, ...opts, properties: { sessionExpiryInterval: 0 } });
        const got = collect(again);
        await until(() => payloads(got).includes('queued-open'), 'queued-open');
        assert.deepEqual(payloads(got), ['queued-open']);
        assert.equal(b.listener.hub.stats.dropped.notAuthorized, before + 1);
        await again.endAsync();
      } finally {
        await ctl.directory.deletePolicy('deny-off-secret');
        await ctl.directory.deletePolicy('allow-off');
      }
    });
  });

  describe('quotas, registry and kick', () => {
    test('the namespace connection quota: v5 CONNACK 0x97, 3.1.1 0x03', async () => {
      await ctl.directory.putNamespace({ name: 'small', quotas: { maxConnections: 1 } });
      await ctl.directory.addUser({ username: 'carol', password: 'carol-pw', namespace: 'small' });
      const first = await connect(b, 5, { username: 'carol', password: 'carol-pw' });
      try {
        const v5 = await rawConnect(b, 5, 'q5', { username: 'carol', password: Buffer.from('carol-pw') });
        assert.equal(v5.connack.returnCode, 0x97);
        const v4 = await rawConnect(b, 4, 'q4', { username: 'carol', password: Buffer.from('carol-pw') });
        assert.equal(v4.connack.returnCode, 0x03);
        assert.ok(ctl.access.quotas.figures().small.refusedConnections >= 2);
      } finally {
        await first.endAsync();
      }
      // The lease went back with the connection: room again.
      await until(() => ctl.access.quotas.figures().small.connections === 0, 'lease released');
      const again = await connect(b, 4, { username: 'carol', password: 'carol-pw' });
      await again.endAsync();
    });

    test('the publish-rate quota holds the publisher back (reading paused), and every message still arrives', async () => {
      await ctl.directory.putNamespace({ name: 'slow', quotas: { publishRate: 20 } });
      await ctl.directory.addUser({ username: 'dave', password: 'dave-pw', namespace: 'slow' });
      // A namespace is a tenant: the subscriber is in it too (core namespaces.ts).
      const sub = await connect(b, 5, { username: 'dave', password: 'dave-pw' });
      const got = collect(sub);
      await sub.subscribeAsync('rate/#', { qos: 1 });
      const pub = await connect(b, 5, { username: 'dave', password: 'dave-pw' });
      try {
        const before = b.listener.hub.stats.throttled;
        // One second's worth passes at once (the bucket's burst); the rest are held back.
        await Promise.all(Array.from({ length: 40 }, (_, i) => pub.publishAsync('rate/x', `m${i}`, { qos: 1 })));
        await until(() => got.length === 40, 'all 40 delivered', 15_000);
        assert.ok(ctl.access.quotas.figures().slow.throttled > 0, 'the namespace was throttled');
        assert.ok(b.listener.hub.stats.throttled > before, 'the connection was held back');
      } finally {
        await Promise.all([sub.endAsync(), pub.endAsync()]);
      }
    });

    test('the bytes-out quota charges deliveries: the subscriber is held back, and still gets everything', async () => {
      await ctl.directory.putNamespace({ name: 'narrow', quotas: { bytesOutRate: 2000 } });
      await ctl.directory.addUser({ username: 'nora', password: 'nora-pw', namespace: 'narrow' });
      const sub = await connect(b, 5, { username: 'nora', password: 'nora-pw' });
      const got = collect(sub);
      await sub.subscribeAsync('wide/#', { qos: 1 });
      // A namespace is a tenant: the publisher is in it too (core namespaces.ts).
      const pub = await connect(b, 5, { username: 'nora', password: 'nora-pw' });
      try {
        const before = ctl.access.quotas.figures().narrow?.throttled ?? 0;
        // 10 x 500 bytes: over two seconds' worth of the subscriber's namespace rate.
        for (let i = 0; i < 10; i++) await pub.publishAsync('wide/x', Buffer.alloc(500, i), { qos: 1 });
        await until(() => got.length === 10, 'all 10 delivered', 15_000);
        assert.ok(ctl.access.quotas.figures().narrow.throttled > before, 'the subscriber was held back');
        const out = ctl.access.clients
          .list()
          .filter((x) => x.user === 'nora')
          .reduce((n, x) => n + x.messagesOut, 0);
        assert.equal(out, 10);
      } finally {
        await Promise.all([sub.endAsync(), pub.endAsync()]);
      }
    });

    test('a WebSocket client is registered under the mqtt-ws listener with its socket byte counts, and logs in the same way', async () => {
      const ws = await startMqttWsListener({ engine: b.engine, logger: b.logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 }, b.listener.hub);
      try {
        const wsUrl = `ws://127.0.0.1:${ws.address().port}/mqtt`;
        await assert.rejects(
          mqtt.connectAsync(wsUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'alice', password: 'nope' }),
          (err: { code?: number }) => err.code === 0x86,
        );
        const c = await mqtt.connectAsync(wsUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'alice', password: 'alice-pw', clientId: 'over-ws' });
        try {
          await c.publishAsync('ws/x', 'hello', { qos: 1 });
          const e = ctl.access.clients.list().find((x) => x.clientId === 'over-ws');
          assert.equal(e?.reg.listener, 'mqtt-ws');
          assert.equal(e?.user, 'alice');
          assert.ok(e.bytesIn > 0 && e.bytesOut > 0);
        } finally {
          await c.endAsync();
        }
      } finally {
        await ws.close();
      }
    });

    test('kick: v5 DISCONNECT 0x98 Administrative action; 3.1.1 closed', async () => {
      const c5 = await connect(b, 5, { username: 'alice', password: 'alice-pw', clientId: 'kick5' });
      const c4 = await connect(b, 4, { username: 'alice', password: 'alice-pw', clientId: 'kick4' });
      const reason = new Promise<number | undefined>((resolve) => c5.once('disconnect', (p) => resolve(p.reasonCode)));
      const closed4 = new Promise<void>((resolve) => c4.once('close', () => resolve()));
      const e5 = ctl.access.clients.list().find((e) => e.clientId === 'kick5')!;
      const e4 = ctl.access.clients.list().find((e) => e.clientId === 'kick4')!;
      assert.ok(ctl.access.clients.kick(e5.id));
      assert.ok(ctl.access.clients.kick(e4.id));
      assert.equal(await reason, 0x98);
      await closed4;
      await until(() => ctl.access.clients.get(e5.id) === undefined && ctl.access.clients.get(e4.id) === undefined, 'entries gone');
      c5.end(true);
    });
  });
});

describe('mqtt under the control plane, anonymous access on', () => {
  let ctl: Ctl;
  let b: TestBroker;
  before(async () => {
    ctl = await makeAccess({ anonymous: true });
    b = await startBroker({ access: ctl.access, sysIntervalMs: 0 });
  });
  after(async () => {
    await b.close();
    await ctl.close();
  });

  test('with no users at all any credentials are let in (zero setup); once a user exists they are checked', async () => {
    const any = await rawConnect(b, 4, 'z1', { username: 'whoever', password: Buffer.from('x') });
    assert.equal(any.connack.returnCode, 0);
    any.c.destroy();
    await ctl.directory.addUser({ username: 'erin', password: 'erin-pw' });
    const bad = await rawConnect(b, 4, 'z2', { username: 'whoever', password: Buffer.from('x') });
    assert.equal(bad.connack.returnCode, 0x04);
    const anon = await rawConnect(b, 4, 'z3');
    assert.equal(anon.connack.returnCode, 0);
    anon.c.destroy();
  });

  test('anonymous clients are matched by `everyone` policies only', async () => {
    await ctl.directory.putPolicy({ name: 'erin-only', effect: 'allow', actions: ['publish', 'subscribe'], resources: ['topic:#'], principals: ['user:erin'] });
    try {
      const anon = await connect(b, 5);
      await assert.rejects(anon.publishAsync('x', 'y', { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
      await anon.endAsync();
      await ctl.directory.putPolicy({ name: 'all-x', effect: 'allow', actions: ['publish'], resources: ['topic:x'], principals: ['everyone'] });
      const anon2 = await connect(b, 5);
      await anon2.publishAsync('x', 'y', { qos: 1 });
      await anon2.endAsync();
    } finally {
      await ctl.directory.deletePolicy('erin-only');
      await ctl.directory.deletePolicy('all-x').catch(() => undefined);
    }
    await sleep(0);
  });
});

describe('mqtt under the control plane, users from the auth webhook', () => {
  let ctl: Ctl;
  let b: TestBroker;
  let hook: http.Server;
  let asked = 0;
  before(async () => {
    // A real HTTP endpoint answering as an external identity system would.
    hook = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        asked++;
        const q = JSON.parse(body) as { username: string; password: string; protocol: string };
        const yes = q.username === 'hook-user' && q.password === 'hook-pw' && q.protocol === 'mqtt';
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(yes ? { result: 'allow', groups: ['hooked'] } : { result: 'deny' }));
      });
    });
    await new Promise<void>((r) => hook.listen(0, '127.0.0.1', () => r()));
    const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/auth`;
    ctl = await makeAccess({ external: new WebhookAuthenticator({ url, timeoutMs: 5000, cacheTtlMs: 0 }) });
    b = await startBroker({ access: ctl.access, sysIntervalMs: 0 });
    await ctl.directory.putPolicy({ name: 'hooked-h', effect: 'allow', actions: ['publish'], resources: ['topic:h/#'], principals: ['group:hooked'] });
  });
  after(async () => {
    await b.close();
    await ctl.close();
    hook.close();
  });

  test('a user the directory does not know logs in through the webhook, with the groups it answers', async () => {
    const c = await connect(b, 5, { username: 'hook-user', password: 'hook-pw' });
    try {
      await c.publishAsync('h/x', 'via group hooked', { qos: 1 });
      await assert.rejects(c.publishAsync('elsewhere', 'x', { qos: 1 }), (err: { code?: number }) => err.code === 0x87);
    } finally {
      await c.endAsync();
    }
    const before = asked;
    const bad = await rawConnect(b, 5, 'hook-bad', { username: 'hook-user', password: Buffer.from('wrong') });
    assert.equal(bad.connack.returnCode, 0x86);
    assert.equal(asked, before + 1, 'the webhook was asked');
  });
});
