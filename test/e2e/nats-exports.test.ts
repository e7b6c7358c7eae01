/**
 * NATS account exports and imports between namespaces (issues 28, 29), with the real `nats` client and MQTT.js
 * against a broker started by the test from a users file: t1 exports streams (one public, one to t2 only) and a
 * service; t2 imports them with a prefix, a `to` mapping and a local service subject; t3 imports t1's restricted
 * stream without the grant (refused, logged, nothing crosses); jsacc exports its JetStream API, acks and deliver
 * subjects as nats.js's tests configure them, and t2 pulls from jsacc's consumer through `IPA.>`. A deny policy of a
 * t2 user holds on an imported subject; an MQTT publish of t1 reaches t2's NATS subscriber. Absence is proven with a
 * marker sent after, on the same path.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import mqtt from 'mqtt';
import { AckPolicy, connect, createInbox, jwtAuthenticator, StringCodec, type NatsConnection, type Subscription } from 'nats';
import { createAccount, createOperator, createUser, encodeAccount, encodeActivation, encodeOperator, encodeUser } from '@nats-io/jwt';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

const sc = StringCodec();

/** Reads a subscription until `marker`; answers `subject=payload` of what came before it. */
async function untilMarker(sub: Subscription, marker: string): Promise<string[]> {
  const got: string[] = [];
  const timer = setTimeout(() => sub.unsubscribe(), 10_000);
  let seen = false;
  for await (const m of sub) {
    const v = `${m.subject}=${sc.decode(m.data)}`;
    if (sc.decode(m.data) === marker) {
      seen = true;
      break;
    }
    got.push(v);
  }
  clearTimeout(timer);
  assert.ok(seen, `marker ${marker} not received (got ${JSON.stringify(got)})`);
  return got;
}

const USERS_FILE = `
users:
  - {username: ann, password: ann-pw, namespace: t1}
  - {username: bob, password: bob-pw, namespace: t2}
  - {username: eve, password: eve-pw, namespace: t2}
  - {username: cat, password: cat-pw, namespace: t3}
  - {username: js, password: js-pw, namespace: jsacc}
  - {username: root, password: root-pw, groups: [admins]}
namespaces:
  - name: t1
    exports:
      - {stream: "prices.>"}
      - {stream: "orders.>", accounts: [t2]}
      - {service: "svc.>"}
  - name: t2
    imports:
      - {stream: {account: t1, subject: "prices.>"}, prefix: "t1"}
      - {stream: {account: t1, subject: "orders.>"}, to: "in.orders.>"}
      - {service: {account: t1, subject: "svc.>"}, to: "t1svc.>"}
      - {service: {account: jsacc, subject: "$JS.API.>"}, to: "IPA.>"}
      - {service: {account: jsacc, subject: "$JS.ACK.>"}}
      - {stream: {account: jsacc, subject: "A.>"}}
  - name: t3
    imports:
      - {stream: {account: t1, subject: "orders.>"}}
      - {stream: {account: t1, subject: "prices.>"}}
  - name: jsacc
    exports:
      - {service: "$JS.API.>", response_type: stream}
      - {service: "$JS.ACK.>", response_type: stream}
      - {stream: "A.>", accounts: [t2]}
policies:
  - {name: eve-no-secret, effect: deny, actions: [subscribe], resources: ["topic:t1/prices/secret/#"], principals: ["user:eve"]}
  - {name: ann-no-blocked, effect: deny, actions: [publish], resources: ["topic:prices/blocked"], principals: ["user:ann"]}
`;

describe('e2e: NATS account exports and imports between namespaces', () => {
  let dir = '';
  let broker: Broker;
  let natsUrl = '';
  let mqttUrl = '';
  const conns: NatsConnection[] = [];
  const logLines: Array<Record<string, unknown>> = [];

  async function as(user: string, opts: Record<string, unknown> = {}): Promise<NatsConnection> {
    const nc = await connect({ servers: natsUrl, user, pass: `${user}-pw`, ...opts });
    conns.push(nc);
    return nc;
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-natsexp-'));
    writeFileSync(join(dir, 'users.yaml'), USERS_FILE);
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'mqtt,nats',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'nats-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'default-policy': 'allow',
    };
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        for (const line of chunk.toString().split('\n')) if (line.trim() !== '') logLines.push(JSON.parse(line) as Record<string, unknown>);
        cb();
      },
    });
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'warn' }, sink));
    natsUrl = `nats://127.0.0.1:${broker.listeners.get('nats')!.address().port}`;
    mqttUrl = `mqtt://127.0.0.1:${broker.listeners.get('mqtt')!.address().port}`;
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('stream export/import: a prefix and a `to` mapping; the exporter sees its own subjects', async () => {
    const ann = await as('ann');
    const bob = await as('bob');
    const prefixed = bob.subscribe('t1.prices.>');
    const mapped = bob.subscribe('in.orders.*');
    // The exporter's own subjects are not the importer's: t2's `prices.>` gets nothing of t1.
    const unmapped = bob.subscribe('prices.>');
    await bob.flush();
    ann.publish('prices.eur', sc.encode('1.1'));
    ann.publish('orders.new', sc.encode('o1'));
    ann.publish('prices.end', sc.encode('end'));
    ann.publish('orders.end', sc.encode('end'));
    assert.deepEqual(await untilMarker(prefixed, 'end'), ['t1.prices.eur=1.1']);
    assert.deepEqual(await untilMarker(mapped, 'end'), ['in.orders.new=o1']);
    bob.publish('prices.end', sc.encode('end'));
    assert.deepEqual(await untilMarker(unmapped, 'end'), []);
  });

  test('service export/import: request/reply across namespaces, a singleton response, no responders', async () => {
    const ann = await as('ann');
    const bob = await as('bob');
    const seen: string[] = [];
    const responder = ann.subscribe('svc.>', {
      callback: (_e, m) => {
        seen.push(`${m.subject} reply=${m.reply?.startsWith('_R_.') ? '_R_' : m.reply}`);
        const body = sc.decode(m.data);
        if (body === 'twice') {
          m.respond(sc.encode('first'));
          m.respond(sc.encode('second'));
        } else m.respond(sc.encode(`t1:${body}`));
      },
    });
    await ann.flush();
    const r = await bob.request('t1svc.echo', sc.encode('hi'), { timeout: 3000 });
    assert.equal(sc.decode(r.data), 't1:hi');
    // The responder in t1 saw the export's subject and a reply subject of its own account.
    assert.deepEqual(seen, ['svc.echo reply=_R_']);
    // Singleton: the responder's second response to one request does not reach the requester.
    const inbox = createInbox();
    const replies = bob.subscribe(inbox);
    await bob.flush();
    bob.publish('t1svc.x', sc.encode('twice'), { reply: inbox });
    await bob.flush();
    await ann.flush();
    bob.publish('t1svc.x', sc.encode('end'), { reply: inbox });
    const got = await untilMarker(replies, 't1:end');
    assert.deepEqual(got, [`${inbox}=first`]);
    // Nobody in t1 on the subject: the requester learns it at once (503), as in its own account.
    responder.unsubscribe();
    await ann.flush();
    await assert.rejects(bob.request('t1svc.nobody', sc.encode('x'), { timeout: 3000 }), (e: Error & { code?: string }) => e.code === '503');
    // The t2 client's own `svc.echo` is not t1's: nothing answers it there.
    await assert.rejects(bob.request('svc.echo', sc.encode('x'), { timeout: 3000 }), (e: Error & { code?: string }) => e.code === '503');
  });

  test('an import of an export not granted to the namespace is refused with a log; nothing crosses', async () => {
    const refused = logLines.filter((l) => l.msg === 'namespace import refused' && l.namespace === 't3');
    assert.equal(refused.length, 1, JSON.stringify(logLines));
    assert.match(String(refused[0]!.reason), /not granted to t3/);
    const ann = await as('ann');
    const cat = await as('cat');
    const all = cat.subscribe('>');
    await cat.flush();
    ann.publish('orders.secret', sc.encode('o2'));
    // t3's public import still works: the marker comes through it, after the restricted message.
    ann.publish('prices.mark', sc.encode('end'));
    assert.deepEqual(await untilMarker(all, 'end'), []);
  });

  test('the admin API shows and changes exports and imports; a grant added takes effect at once, a bad one is 400', async () => {
    const base = `http://127.0.0.1:${broker.ports().http}`;
    const headers = { authorization: `Basic ${Buffer.from('root:root-pw').toString('base64')}`, 'content-type': 'application/json' };
    const get = (await (await fetch(`${base}/api/v1/namespaces/t1`, { headers })).json()) as { exports: unknown[] };
    assert.deepEqual(get.exports, [{ stream: 'prices.>' }, { stream: 'orders.>', accounts: ['t2'] }, { service: 'svc.>' }]);
    const bad = await fetch(`${base}/api/v1/namespaces/t1`, { method: 'PATCH', headers, body: JSON.stringify({ exports: [{ stream: 'a.>.b' }] }) });
    assert.equal(bad.status, 400);
    const exports = [{ stream: 'prices.>' }, { stream: 'orders.>', accounts: ['t2', 't3'] }, { service: 'svc.>' }];
    const ok = await fetch(`${base}/api/v1/namespaces/t1`, { method: 'PATCH', headers, body: JSON.stringify({ exports }) });
    assert.equal(ok.status, 200);
    assert.deepEqual(((await ok.json()) as { exports: unknown[] }).exports, exports);
    const ann = await as('ann');
    const cat = await as('cat');
    const all = cat.subscribe('orders.>');
    await cat.flush();
    ann.publish('orders.now', sc.encode('granted'));
    ann.publish('orders.end', sc.encode('end'));
    assert.deepEqual(await untilMarker(all, 'end'), ['orders.now=granted']);
    // Back as it was (the other tests' grants).
    const back = await fetch(`${base}/api/v1/namespaces/t1`, { method: 'PATCH', headers, body: JSON.stringify({ exports: get.exports }) });
    assert.equal(back.status, 200);
  });

  test("a deny policy of the importer's user holds on an imported subject; the exporter's deny holds on its publish", async () => {
    const ann = await as('ann');
    const eve = await as('eve');
    const annDenied = await as('ann');
    const sub = eve.subscribe('t1.prices.>');
    await eve.flush();
    ann.publish('prices.secret.key', sc.encode('s1'));
    ann.publish('prices.open', sc.encode('p1'));
    annDenied.publish('prices.blocked', sc.encode('b1'));
    await annDenied.flush();
    ann.publish('prices.end', sc.encode('end'));
    assert.deepEqual(await untilMarker(sub, 'end'), ['t1.prices.open=p1']);
  });

  test("an MQTT publish in t1 on an exported topic reaches t2's NATS subscriber of the import", async () => {
    const bob = await as('bob');
    const sub = bob.subscribe('in.orders.>');
    await bob.flush();
    const m = await mqtt.connectAsync(mqttUrl, { protocolVersion: 5, reconnectPeriod: 0, username: 'ann', password: 'ann-pw' });
    try {
      await m.publishAsync('orders/mqtt/1', 'from-mqtt', { qos: 1 });
      await m.publishAsync('orders/end', 'end', { qos: 1 });
    } finally {
      await m.endAsync();
    }
    assert.deepEqual(await untilMarker(sub, 'end'), ['in.orders.mqtt.1=from-mqtt']);
  });

  test("JetStream across accounts: t2 pulls from jsacc's consumer through its imported API (`IPA`), acks through $JS.ACK", async () => {
    const admin = await as('js');
    const ajsm = await admin.jetstreamManager();
    await ajsm.streams.add({ name: 'ORDERS', subjects: ['ORDERS.>'] });
    const ajs = admin.jetstream();
    await ajs.publish('ORDERS.a', sc.encode('one'));
    await ajs.publish('ORDERS.b', sc.encode('two'));
    await ajsm.consumers.add('ORDERS', { durable_name: 'me', ack_policy: AckPolicy.Explicit });

    const bob = await as('bob', { inboxPrefix: 'A' });
    // t2 has no stream ORDERS of its own: its own API says so.
    const ownJsm = await bob.jetstreamManager();
    await assert.rejects(ownJsm.streams.info('ORDERS'), /stream not found/);
    const jsm = await bob.jetstreamManager({ apiPrefix: 'IPA' });
    const si = await jsm.streams.info('ORDERS');
    assert.equal(si.state.messages, 2);
    const js = bob.jetstream({ apiPrefix: 'IPA' });
    const c = await js.consumers.get('ORDERS', 'me');
    const m1 = await c.next({ expires: 3000 });
    assert.ok(m1);
    assert.equal(m1.seq, 1);
    assert.equal(m1.subject, 'ORDERS.a');
    assert.equal(await m1.ackAck(), true);
    const m2 = await c.next({ expires: 3000 });
    assert.ok(m2);
    assert.equal(m2.seq, 2);
    assert.equal(sc.decode(m2.data), 'two');
    assert.equal(await m2.ackAck(), true);
    assert.equal(await c.next({ expires: 1000 }), null);
    const ci = await ajsm.consumers.info('ORDERS', 'me');
    assert.equal(ci.num_ack_pending, 0);
    assert.equal(ci.ack_floor.stream_seq, 2);
  });
});

describe('e2e: exports and imports from account JWTs (operator mode)', () => {
  let dir = '';
  let broker: Broker;
  let natsUrl = '';
  const conns: NatsConnection[] = [];
  const logLines: Array<Record<string, unknown>> = [];
  const creds: Record<string, { jwt: string; seed: Uint8Array }> = {};

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-natsexp-jwt-'));
    const operator = createOperator();
    const pub = createAccount();
    const sub1 = createAccount();
    const sub2 = createAccount();
    // pub: a public stream and a private service (token_req) granted to sub1 by an activation token.
    const pubJwt = await encodeAccount(
      'pub',
      pub,
      {
        exports: [
          { name: 'news', subject: 'news.>', type: 'stream' },
          { name: 'help', subject: 'help.>', type: 'service', token_req: true, response_type: 'Singleton' },
        ],
      },
      { signer: operator },
    );
    const activation = await encodeActivation('help-for-sub1', sub1, pub, 'service', { subject: 'help.>' });
    const sub1Jwt = await encodeAccount(
      'sub1',
      sub1,
      {
        imports: [
          { name: 'news', subject: 'news.>', account: pub.getPublicKey(), type: 'stream', to: 'pub' },
          { name: 'help', subject: 'help.>', account: pub.getPublicKey(), type: 'service', token: activation, local_subject: 'ask.>' },
        ],
      },
      { signer: operator },
    );
    // sub2 imports the private service without a token: refused.
    const sub2Jwt = await encodeAccount(
      'sub2',
      sub2,
      { imports: [{ name: 'help', subject: 'help.>', account: pub.getPublicKey(), type: 'service', local_subject: 'ask.>' }] },
      { signer: operator },
    );
    writeFileSync(join(dir, 'op.jwt'), await encodeOperator('op', operator));
    writeFileSync(join(dir, 'accounts.jwt'), [pubJwt, sub1Jwt, sub2Jwt].join('\n'));
    for (const [name, acc] of [
      ['pub', pub],
      ['sub1', sub1],
      ['sub2', sub2],
    ] as const) {
      const u = createUser();
      creds[name] = { jwt: await encodeUser(`${name}-user`, u, acc), seed: u.getSeed() };
    }
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'nats',
      'nats-port': '0',
      'http-port': '0',
      'nats-operator': join(dir, 'op.jwt'),
      'nats-accounts': join(dir, 'accounts.jwt'),
    };
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        for (const line of chunk.toString().split('\n')) if (line.trim() !== '') logLines.push(JSON.parse(line) as Record<string, unknown>);
        cb();
      },
    });
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'warn' }, sink));
    natsUrl = `nats://127.0.0.1:${broker.listeners.get('nats')!.address().port}`;
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function as(account: string): Promise<NatsConnection> {
    const nc = await connect({ servers: natsUrl, authenticator: jwtAuthenticator(creds[account]!.jwt, creds[account]!.seed) });
    conns.push(nc);
    return nc;
  }

  test('a public stream export reaches the importer under its JWT `to` prefix; a token-granted service answers', async () => {
    const p = await as('pub');
    const s1 = await as('sub1');
    const news = s1.subscribe('pub.news.>');
    await s1.flush();
    p.publish('news.today', sc.encode('n1'));
    p.publish('news.end', sc.encode('end'));
    assert.deepEqual(await untilMarker(news, 'end'), ['pub.news.today=n1']);
    p.subscribe('help.>', { callback: (_e, m) => m.respond(sc.encode(`help:${m.subject}`)) });
    await p.flush();
    const r = await s1.request('ask.me', sc.encode('?'), { timeout: 3000 });
    assert.equal(sc.decode(r.data), 'help:help.me');
  });

  test('a private service imported without an activation token is refused with a log; its requests reach nobody', async () => {
    const refused = logLines.filter((l) => l.msg === 'namespace import refused' && l.namespace === 'sub2');
    assert.equal(refused.length, 1, JSON.stringify(logLines));
    assert.match(String(refused[0]!.reason), /not granted to sub2/);
    const s2 = await as('sub2');
    await assert.rejects(s2.request('ask.me', sc.encode('?'), { timeout: 3000 }), (e: Error & { code?: string }) => e.code === '503');
  });
});
