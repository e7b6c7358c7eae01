/**
 * OIDC identities on every protocol against a real `flowmq start`: the test is its own identity provider (a key pair
 * made by jose, its public half served as a JWKS by a node:http server) and signs the tokens that unmodified clients
 * log in with: KafkaJS (SASL OAUTHBEARER through oauthBearerProvider, with a KIP-368 re-authentication), a current
 * librdkafka (@confluentinc/kafka-javascript from test/interop, which re-authenticates before its session ends),
 * Debian's python3-confluent-kafka (librdkafka 2.0.2, oauth_cb, no KIP-368: its expired session is closed and it
 * reconnects with the next token), mqtt.js (the token as the password), amqplib (PLAIN password,
 * then connection.update-secret), nats.js (auth_token, and as a password) and fetch on the admin API (Bearer).
 * Refused: a wrong issuer, a wrong audience, an expired token, an unknown kid, a bad signature, a namespace the
 * broker does not know. A session that outlives its token without renewing it is closed, on each protocol.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import amqp from 'amqplib';
import { Kafka, logLevel, type SASLOptions } from 'kafkajs';
import mqtt from 'mqtt';
import { connect as natsConnect, StringCodec, type NatsError } from 'nats';
import { FlowmqProcess, ROOT, eventually } from './harness.js';
import { makeKey, TestIdp, type IdpKey } from '../control/oidc-idp.js';

const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const PY_CLIENT = join(ROOT, 'test/e2e/kafka-oauth-client.py');
/** A current librdkafka (2.15, KIP-368 since 2.2): the interop package kafka-librdkafka-current.test.ts uses. */
const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');

interface CkProducer {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  send(r: { topic: string; messages: Array<{ value: string }> }): Promise<unknown>;
}
type CkKafka = new (c: Record<string, unknown>) => { producer(c?: Record<string, unknown>): CkProducer };

function currentLibrdkafka(): CkKafka {
  const require = createRequire(join(INTEROP, 'package.json'));
  try {
    return (require('@confluentinc/kafka-javascript') as { KafkaJS: { Kafka: CkKafka } }).KafkaJS.Kafka;
  } catch (err) {
    throw new Error(`@confluentinc/kafka-javascript is not installed in ${INTEROP}: run test/interop/confluent-kafka-javascript/install.sh`, {
      cause: err,
    });
  }
}

let idp: TestIdp;
let rsa: IdpKey;
let ec: IdpKey;
let broker: FlowmqProcess;

/** A token for `sub` (namespace team-a unless said otherwise), valid for `ttl` seconds. */
function token(sub: string, claims: Record<string, unknown> = {}, ttl = 300, key: IdpKey = rsa): Promise<string> {
  return idp.sign(key, { sub, flowmq_ns: 'team-a', ...claims }, ttl);
}

/** The refusals every protocol must give: [what, token]. */
async function badTokens(): Promise<Array<[string, string]>> {
  const stranger = await makeKey('rsa-1', 'RS256'); // the published kid, another key
  const unknown = await makeKey('not-published', 'ES256');
  return [
    ['wrong issuer', await token('eve', { iss: 'https://elsewhere.example/' })],
    ['wrong audience', await token('eve', { aud: 'another-service' })],
    ['expired', await token('eve', {}, -30)],
    ['unknown kid', await token('eve', {}, 300, unknown)],
    ['bad signature', await token('eve', {}, 300, stranger)],
    ['unknown namespace', await token('eve', { flowmq_ns: 'no-such-namespace' })],
  ];
}

function kafkaClient(provider: () => Promise<string>, opts: { reauthenticationThreshold?: number } = {}): Kafka {
  const sasl = { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: await provider() }) } as SASLOptions;
  return new Kafka({
    clientId: 'oidc-e2e',
    brokers: [broker.kafka],
    sasl,
    logLevel: logLevel.NOTHING,
    retry: { retries: 0 },
    connectionTimeout: 5000,
    ...opts,
  });
}

function python(args: string[], tokens: Array<[string, number]>): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const p = spawn(PYTHON, [PY_CLIENT, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.on('exit', (code) => {
      const last = out
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .pop();
      if (code !== 0 || last === undefined) reject(new Error(`python ${args[0]} exited ${code}: ${err}\n${out}`));
      else resolve(JSON.parse(last) as Record<string, unknown>);
    });
    p.stdin.end(JSON.stringify({ tokens }));
  });
}

const expOf = (jwt: string): number => (JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString()) as { exp: number }).exp;

async function api(path: string, bearer: string, method = 'GET', body?: unknown): Promise<{ status: number; json: unknown }> {
  const res = await fetch(broker.http + path, {
    method,
    headers: { authorization: `Bearer ${bearer}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as unknown) : null };
}

describe('OIDC JWT identities on every protocol (bin/flowmq, a local JWKS endpoint)', { timeout: 60_000 }, () => {
  before(async () => {
    idp = await new TestIdp().start();
    rsa = await makeKey('rsa-1', 'RS256');
    ec = await makeKey('ec-1', 'ES256');
    idp.published = [rsa, ec];
    broker = await FlowmqProcess.start({
      args: [
        '--allow-anonymous',
        'false',
        '--oidc-issuer',
        idp.issuer,
        '--oidc-audience',
        idp.audience,
        '--oidc-jwks-url',
        idp.url,
        '--oidc-namespace-claim',
        'flowmq_ns',
        '--oidc-admin-groups',
        'platform-admins',
        '--oidc-clock-skew',
        '0s',
        // The refusals below come from one address; the throttle is the password guard's, tested on its own.
        '--auth-free-failures',
        '1000',
        // No KIP-134 wait for the one-member Kafka group (3 s otherwise).
        '--kafka-group-initial-rebalance-delay',
        '0',
      ],
    });
    // The administrator is a token user too (the IdP's platform-admins group): it makes the tenant's namespace.
    const admin = await token('root', { groups: ['platform-admins'], flowmq_ns: undefined });
    assert.equal((await api('/api/v1/namespaces', admin, 'POST', { name: 'team-a' })).status, 201);
    // Policies apply to token users as to any: everyone may use the data, contractors may not publish secrets.
    const data = {
      name: 'everyone-data',
      effect: 'allow',
      actions: ['publish', 'subscribe', 'create', 'delete', 'describe', 'alter', 'respond'],
      resources: ['topic:#', 'stream:*', 'queue:*', 'exchange:*', 'group:*', 'transactional-id:*', 'cluster:*'],
      principals: ['everyone'],
    };
    assert.equal((await api('/api/v1/policies', admin, 'POST', data)).status, 201);
    const deny = { name: 'contractors-no-secrets', effect: 'deny', actions: ['publish'], resources: ['topic:secret/#'], principals: ['group:contractors'] };
    assert.equal((await api('/api/v1/policies', admin, 'POST', deny)).status, 201);
  });

  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    await idp?.stop();
  });

  it('admin API: a Bearer JWT is the caller; admin only through the mapped group; bad tokens are 401', async () => {
    const admin = await token('root', { groups: ['platform-admins'], flowmq_ns: undefined });
    const who = await api('/api/v1/session', admin);
    assert.equal(who.status, 200, JSON.stringify(who.json));
    const s = who.json as { user: string; groups: string[]; via: string; admin: boolean; expiresAt: string };
    assert.deepEqual([s.user, s.via, s.admin], ['root', 'jwt', true]);
    assert.ok(s.groups.includes('admins'), JSON.stringify(s));
    assert.ok(Date.parse(s.expiresAt) > Date.now(), 'the session shows the token expiry');
    const plain = await token('dora', { groups: ['devs'] });
    assert.equal((await api('/api/v1/namespaces', plain, 'POST', { name: 'team-b' })).status, 403);
    for (const [what, bad] of await badTokens()) assert.equal((await api('/api/v1/session', bad)).status, 401, what);
    // The dashboard: its login form takes the token as the password; the session keeps the token's claims.
    const login = await fetch(`${broker.http}/api/v1/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: 'whoever', password: admin }),
    });
    assert.equal(login.status, 200, await login.clone().text());
    assert.equal(((await login.json()) as { user: string }).user, 'root');
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0];
    const viaCookie = (await (await fetch(`${broker.http}/api/v1/session`, { headers: { cookie } })).json()) as { user: string; via: string; admin: boolean };
    assert.deepEqual([viaCookie.user, viaCookie.via, viaCookie.admin], ['root', 'session', true]);
    // No users table row was needed for any of them.
    assert.deepEqual(((await api('/api/v1/users', admin)).json as { items: unknown[] }).items, []);
  });

  it('Kafka SASL OAUTHBEARER (KafkaJS): produce and consume, a KIP-368 re-authentication, refusals', async () => {
    let calls = 0;
    const provider = async () => {
      calls++;
      return token('alice', { groups: ['devs'] }, 60);
    };
    // KafkaJS re-authenticates before a request once the session's lifetime is within the threshold: with 60 s
    // tokens and a 59.5 s threshold, the first request after half a second re-authenticates.
    const k = kafkaClient(provider, { reauthenticationThreshold: 59_500 });
    const producer = k.producer({ allowAutoTopicCreation: true });
    await producer.connect();
    await producer.send({ topic: 'oidc-kafka', messages: [{ value: 'first' }] });
    await new Promise((r) => setTimeout(r, 700));
    await producer.send({ topic: 'oidc-kafka', messages: [{ value: 'second' }] });
    await broker.waitForLog((l) => l.msg === 'SASL authentication succeeded' && l.reauthentication === true && l.principal === 'alice');
    assert.ok(calls >= 2, `the provider was asked again for the re-authentication (${calls} calls)`);
    await producer.disconnect();
    const consumer = k.consumer({ groupId: 'oidc-group' });
    await consumer.connect();
    await consumer.subscribe({ topic: 'oidc-kafka', fromBeginning: true });
    const seen: string[] = [];
    await consumer.run({ eachMessage: async ({ message }) => void seen.push(String(message.value)) });
    await eventually(() => seen.length >= 2, 15_000, 'both records read');
    await consumer.disconnect();
    assert.deepEqual(seen.slice(0, 2), ['first', 'second']);
    for (const [what, bad] of await badTokens()) {
      const p = kafkaClient(async () => bad).producer();
      // Kafka answers a refused token with the RFC 7628 error challenge, then fails the exchange: KafkaJS takes the
      // challenge for success, and its next request finds the connection closed. Either way: no produce.
      await assert.rejects(
        (async () => {
          await p.connect();
          await p.send({ topic: 'oidc-kafka', messages: [{ value: 'refused' }] });
        })(),
        what,
      );
      await p.disconnect().catch(() => undefined);
    }
  });

  it('Kafka SASL OAUTHBEARER (python3-confluent-kafka, oauth_cb): round trip; a refused token is reported', async () => {
    const t = await token('bob', { groups: ['devs'] });
    const bad = await token('eve', { aud: 'another-service' });
    const [r, f] = await Promise.all([
      python(['roundtrip', broker.kafka, 'oidc-python', 'oidc-py-group'], [[t, expOf(t)]]),
      python(['refused', broker.kafka, 'oidc-python'], [[bad, expOf(bad)]]),
    ]);
    assert.equal(r.value, 'from-librdkafka', JSON.stringify(r));
    assert.notEqual(f.delivery, null, JSON.stringify(f));
    assert.match(JSON.stringify(f.errors), /_AUTHENTICATION.*invalid credentials with SASL mechanism OAUTHBEARER/, JSON.stringify(f));
  });

  it('MQTT (mqtt.js): the token as the password; policies apply to its groups; refusals are CONNACK 0x86', async () => {
    const c = await mqtt.connectAsync(broker.mqttUrl, {
      protocolVersion: 5,
      reconnectPeriod: 0,
      username: 'any',
      password: await token('carol', { groups: ['contractors'] }),
    });
    try {
      await c.subscribeAsync('news/#', { qos: 1 });
      const got = new Promise<string>((resolve) => c.on('message', (topic, payload) => resolve(`${topic}=${payload.toString()}`)));
      await c.publishAsync('news/today', 'hello', { qos: 1 });
      assert.equal(await got, 'news/today=hello');
      // The deny policy names the token's group: PUBACK 0x87 Not authorized.
      await assert.rejects(c.publishAsync('secret/plans', 'x', { qos: 1 }), (e: { code?: number }) => e.code === 0x87);
    } finally {
      await c.endAsync();
    }
    for (const [what, bad] of await badTokens()) {
      await assert.rejects(
        mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'any', password: bad }),
        (e: { code?: number }) => e.code === 0x86,
        what,
      );
    }
  });

  it('AMQP (amqplib): the token as the PLAIN password, update-secret with a new token; refusals are 403', async () => {
    const url = (t: string) => `amqp://any:${t}@127.0.0.1:${broker.ports.amqp}`;
    const c = await amqp.connect(url(await token('dave')));
    const failed = new Promise<Error>((resolve) => c.on('error', resolve));
    try {
      const ch = await c.createChannel();
      const q = await ch.assertQueue('', { exclusive: true });
      ch.sendToQueue(q.queue, Buffer.from('one'));
      await eventually(async () => (await ch.get(q.queue)) !== false, 5000, 'message back');
      await c.updateSecret(Buffer.from(await token('dave', {}, 600, ec)), 'refreshed');
      ch.sendToQueue(q.queue, Buffer.from('two'));
      await eventually(async () => (await ch.get(q.queue)) !== false, 5000, 'message back after the refresh');
      // Another user's token is no secret of dave's: 530, as for a wrong password.
      void c.updateSecret(Buffer.from(await token('mallory')), 'not mine').catch(() => undefined);
      assert.match((await failed).message, /530/);
    } finally {
      await c.close().catch(() => undefined);
    }
    for (const [what, bad] of await badTokens()) await assert.rejects(amqp.connect(url(bad)), /403|ACCESS_REFUSED/, what);
  });

  it('NATS (nats.js): the token as auth_token and as a password; refusals are Authorization Violation', async () => {
    const sc = StringCodec();
    const nc = await natsConnect({ servers: broker.natsServer, reconnect: false, token: await token('erin') });
    try {
      const sub = nc.subscribe('greet.>', { max: 1 });
      const got = (async () => {
        for await (const m of sub) return `${m.subject}=${sc.decode(m.data)}`;
        return '';
      })();
      nc.publish('greet.erin', sc.encode('hi'));
      assert.equal(await got, 'greet.erin=hi');
    } finally {
      await nc.close();
    }
    const nc2 = await natsConnect({ servers: broker.natsServer, reconnect: false, user: 'any', pass: await token('erin') });
    await nc2.flush();
    await nc2.close();
    for (const [what, bad] of await badTokens()) {
      await assert.rejects(
        natsConnect({ servers: broker.natsServer, reconnect: false, token: bad }),
        (e: NatsError) => e.code === 'AUTHORIZATION_VIOLATION',
        what,
      );
    }
  });

  it('a session that outlives its token is closed on every protocol; a refreshed one goes on', async () => {
    const short = () => token('frank', {}, 3);
    // AMQP: one connection refreshes its token in time and stays; the other is closed with 320 and a reason.
    const url = (t: string) => `amqp://any:${t}@127.0.0.1:${broker.ports.amqp}`;
    const stale = await amqp.connect(url(await short()));
    // 320 CONNECTION_FORCED is no 'error' for amqplib (as for a broker shutdown): its 'close' carries it.
    const staleClosed = new Promise<Error | undefined>((resolve) => stale.on('close', resolve));
    const fresh = await amqp.connect(url(await short()));
    await fresh.updateSecret(Buffer.from(await token('frank', {}, 300)), 'refresh before expiry');
    // MQTT: DISCONNECT 0xA0 (v5).
    const m = await mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'any', password: await short() });
    const mqttGone = new Promise<number | undefined>((resolve) => m.on('disconnect', (p) => resolve(p.reasonCode)));
    // NATS: -ERR 'User Authentication Expired'.
    const nc = await natsConnect({ servers: broker.natsServer, reconnect: false, token: await short() });
    const natsGone = nc.closed();
    // Kafka, librdkafka 2.0.2 (no KIP-368): the broker closes the expired session, the client reconnects with the
    // next token oauth_cb hands it and the second record goes through.
    // Kafka, a current librdkafka: it re-authenticates (KIP-368) at 90% of the session's lifetime, on the same
    // connection, with the token its provider refreshed; the session never expires. 6 s tokens (a lifetime of 5-6 s:
    // exp is in whole seconds) leave it half a second at least.
    const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined };
    const logger = { ...quiet, namespace: () => logger, setLogLevel: () => undefined };
    let refreshes = 0;
    const Ck = currentLibrdkafka();
    const ck = new Ck({
      kafkaJS: {
        brokers: [broker.kafka],
        logger,
        sasl: {
          mechanism: 'oauthbearer',
          oauthBearerProvider: async () => {
            refreshes++;
            const value = await token('gina', {}, 6);
            return { value, principal: 'gina', lifetime: expOf(value) * 1000 };
          },
        },
      },
    }).producer();
    const ckRun = (async () => {
      await ck.connect();
      await ck.send({ topic: 'oidc-reauth', messages: [{ value: 'before' }] });
      await new Promise((r) => setTimeout(r, 6500));
      await ck.send({ topic: 'oidc-reauth', messages: [{ value: 'after' }] });
    })();
    const t1 = await short();
    const t2 = await token('frank', {}, 300);
    const py = python(
      ['expire', broker.kafka, 'oidc-expire', '4.5'],
      [
        [t1, expOf(t1)],
        [t2, expOf(t2)],
      ],
    );
    try {
      assert.match(String((await staleClosed)?.message), /320.*credential expired/);
      assert.equal(await mqttGone, 0xa0);
      const err = await natsGone;
      assert.match(String(err?.message), /user authentication expired/i);
      const r = await py;
      assert.equal((r.first as { err: unknown }).err, null, JSON.stringify(r));
      assert.equal((r.second as { err: unknown }).err, null, JSON.stringify(r));
      assert.ok((r.calls as number) >= 2, JSON.stringify(r));
      await broker.waitForLog((l) => /SASL session expired|request on an expired SASL session/.test(l.msg) && l.principal === 'frank');
      await ckRun;
      assert.ok(refreshes >= 2, `the provider refreshed the token (${refreshes} calls)`);
      await broker.waitForLog((l) => l.msg === 'SASL authentication succeeded' && l.reauthentication === true && l.principal === 'gina');
      assert.equal(
        broker.logs.some((l) => /expired SASL session|SASL session expired/.test(l.msg) && l.principal === 'gina'),
        false,
        'the re-authenticated session did not expire',
      );
      // The refreshed AMQP connection is still there, past the first token's expiry.
      const ch = await fresh.createChannel();
      await ch.checkQueue((await ch.assertQueue('', { exclusive: true })).queue);
    } finally {
      await fresh.close().catch(() => undefined);
      await m.endAsync().catch(() => undefined);
      await ck.disconnect().catch(() => undefined);
    }
  });

  it('counts tokens in /metrics: verified and refused', async () => {
    const text = await (await fetch(`${broker.http}/metrics`)).text();
    const figure = (result: string) => Number(new RegExp(`^flowmq_oidc_tokens_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
    assert.ok(figure('verified') > 10, `verified ${figure('verified')}`);
    // Six bad tokens on each of the admin API, KafkaJS, MQTT, AMQP and NATS, one through librdkafka.
    assert.ok(figure('refused') >= 31, `refused ${figure('refused')}`);
  });

  it('logs refusals with their reason, rate-limited, and never a token', () => {
    const refused = broker.logs.filter((l) => l.msg === 'OIDC token refused');
    assert.ok(refused.length >= 1, 'refusals are logged');
    for (const l of refused) assert.equal(typeof l.reason, 'string');
    // Six refusals per protocol came from one address: the limiter keeps the lines far fewer.
    assert.ok(refused.length < 30, `${refused.length} lines`);
    const leaked = broker.logs.filter((l) => JSON.stringify(l).includes('eyJ'));
    assert.deepEqual(leaked, [], 'no token text in the logs');
  });
});
