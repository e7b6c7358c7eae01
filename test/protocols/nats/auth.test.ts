/**
 * NATS and the control plane, on the connection: credentials through AccessControl (directory users, API tokens,
 * --nats-token), policies on PUB and SUB with nats-server's exact Permissions Violation texts, deliveries admitted
 * per topic (filtered wildcards, policies changed live), namespace quotas and the client registry.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { createUser } from 'nkeys.js';
import { natsFilterToUnified } from '../../../src/protocols/nats/connection.js';
import { RawClient, makeAccess, startNats, until, type TestAccess } from './helpers.js';

const users = [
  { username: 'alice', password: 'wonder' },
  { username: 'bob', password: 'builder', namespace: 'team' },
  // A second user of each namespace: NATS clients of different namespaces (accounts) share no subject.
  { username: 'carl', password: 'carl-pw' },
  { username: 'dan', password: 'dan-pw', namespace: 'team' },
];

async function withPolicies(a: TestAccess): Promise<void> {
  await a.directory.putPolicy({
    name: 'alice-ok',
    effect: 'allow',
    actions: ['publish', 'subscribe'],
    resources: ['topic:ok/#', 'topic:_INBOX/#'],
    principals: ['user:alice'],
  });
  await a.directory.putPolicy({ name: 'alice-no', effect: 'deny', actions: ['publish'], resources: ['topic:ok/no'], principals: ['user:alice'] });
}

async function login(port: number, user: string, pass: string, extra = ''): Promise<RawClient> {
  const c = await RawClient.connect(port);
  c.send(`CONNECT {"user":"${user}","pass":"${pass}","headers":true${extra}}\r\n`);
  await c.flush();
  return c;
}

describe('NATS authentication through the control plane', () => {
  it('a directory user logs in; a wrong password is an Authorization Violation; anonymous clients are refused when not allowed', async () => {
    const a = await makeAccess({ users, anonymous: false });
    const s = await startNats({}, { access: a });
    const ok = await login(s.port, 'alice', 'wonder', ',"name":"app-1"');
    assert.deepEqual(ok.errors(), []);
    const entry = a.access.clients.list().find((e) => e.user === 'alice');
    assert.ok(entry, 'registered with its user');
    assert.equal(entry.clientId, 'app-1');
    assert.equal(entry.reg.protocol, 'nats');
    const bad = await RawClient.connect(s.port);
    bad.send('CONNECT {"user":"alice","pass":"nope"}\r\nPING\r\n');
    await bad.closed;
    assert.deepEqual(bad.errors(), ['Authorization Violation']);
    const anon = await RawClient.connect(s.port);
    anon.send('CONNECT {}\r\nPING\r\n');
    await anon.closed;
    assert.deepEqual(anon.errors(), ['Authorization Violation']);
    ok.close();
    await s.close();
    await a.close();
  });

  it('every refused login gets the Authorization Violation before the close, also when the throttle is busy', async () => {
    // Failures slowed from the first, and an address may be booked at most 200 ms ahead: after one failure, logins
    // sent together from the same address find the guard busy after the first two.
    const a = await makeAccess({ users, anonymous: false, guard: { throttle: { freeFailures: 0, baseDelayMs: 100, maxDelayMs: 200 } } });
    const s = await startNats({}, { access: a });
    try {
      const first = await RawClient.connect(s.port);
      first.send('CONNECT {"user":"alice","pass":"nope"}\r\nPING\r\n');
      await first.closed;
      assert.deepEqual(first.errors(), ['Authorization Violation']);
      const clients = await Promise.all(Array.from({ length: 8 }, () => RawClient.connect(s.port)));
      for (const c of clients) c.send('CONNECT {"user":"alice","pass":"nope"}\r\nPING\r\n');
      await Promise.all(clients.map((c) => c.closed));
      assert.ok(a.guard.stats.throttled > 0, `the throttle refused some as busy (${JSON.stringify(a.guard.stats)})`);
      assert.ok(a.guard.stats.bad > 1, `and checked others (${JSON.stringify(a.guard.stats)})`);
      for (const c of clients) assert.deepEqual(c.errors(), ['Authorization Violation']);
    } finally {
      await s.close();
      await a.close();
    }
  });

  it("an NKey signature that is not the key holder's: Authorization Violation, throttled as wrong passwords are", async () => {
    const a = await makeAccess({ users, anonymous: false, guard: { throttle: { freeFailures: 0, baseDelayMs: 100, maxDelayMs: 200 } } });
    const key = createUser();
    const thief = createUser();
    await a.directory.setNkey('alice', key.getPublicKey());
    const s = await startNats({}, { access: a });
    try {
      const signed = async (kp: typeof key): Promise<RawClient> => {
        const c = await RawClient.connect(s.port);
        const info = (await c.waitFor((o) => o.op === 'info')) as { info: { nonce?: string } };
        assert.equal(typeof info.info.nonce, 'string', 'INFO carries a nonce once a user has an nkey');
        const sig = Buffer.from(kp.sign(Buffer.from(info.info.nonce!))).toString('base64url');
        c.send(`CONNECT {"nkey":"${key.getPublicKey()}","sig":"${sig}"}\r\nPING\r\n`);
        return c;
      };
      const good = await signed(key);
      await good.waitFor((o) => o.op === 'pong');
      assert.equal(a.access.clients.list().find((e) => e.user === 'alice')?.reg.protocol, 'nats');
      good.close();
      const clients = await Promise.all(Array.from({ length: 8 }, () => signed(thief)));
      await Promise.all(clients.map((c) => c.closed));
      for (const c of clients) assert.deepEqual(c.errors(), ['Authorization Violation']);
      assert.ok(a.guard.stats.throttled > 0, `the throttle refused some as busy (${JSON.stringify(a.guard.stats)})`);
    } finally {
      await s.close();
      await a.close();
    }
  });

  it('auth_token: an API token logs in as its user, an unknown one is refused; --nats-token logs in as anonymous', async () => {
    const a = await makeAccess({ users, anonymous: false });
    const { token } = await a.directory.createToken({ user: 'bob' });
    const s = await startNats({}, { access: a, token: 'shared' });
    const c = await RawClient.connect(s.port);
    c.send(`CONNECT {"auth_token":"${token}"}\r\n`);
    await c.flush();
    assert.equal(a.access.clients.list().find((e) => e.user === 'bob')?.namespace, 'team');
    const shared = await RawClient.connect(s.port);
    shared.send('CONNECT {"auth_token":"shared"}\r\n');
    await shared.flush();
    assert.deepEqual(shared.errors(), []);
    const bad = await RawClient.connect(s.port);
    bad.send(`CONNECT {"auth_token":"${token.slice(0, -2)}xx"}\r\n`);
    await bad.closed;
    assert.deepEqual(bad.errors(), ['Authorization Violation']);
    c.close();
    shared.close();
    await s.close();
    await a.close();
  });

  it('users added live are checked from the next connection on (the broker started with nobody)', async () => {
    const a = await makeAccess({ anonymous: true });
    const s = await startNats({}, { access: a });
    await a.directory.addUser({ username: 'carol', password: 'pw-carol' });
    const bad = await RawClient.connect(s.port);
    bad.send('CONNECT {"user":"carol","pass":"wrong"}\r\n');
    await bad.closed;
    assert.deepEqual(bad.errors(), ['Authorization Violation']);
    const good = await login(s.port, 'carol', 'pw-carol');
    assert.deepEqual(good.errors(), []);
    assert.ok(a.access.clients.list().some((e) => e.user === 'carol'));
    good.close();
    await s.close();
    await a.close();
  });
});

describe('NATS authorization', () => {
  it('the -ERR texts are byte for byte what nats-server 2.9.10 sends, and the connection stays', async () => {
    const a = await makeAccess({ users, anonymous: false });
    await withPolicies(a);
    const s = await startNats({}, { access: a });
    const sock = connect(s.port, '127.0.0.1');
    let got = '';
    sock.on('data', (b: Buffer) => (got += b.toString('latin1')));
    sock.write(
      'CONNECT {"user":"alice","pass":"wonder"}\r\nPUB bad.x 2\r\nhi\r\nPUB ok.no 2\r\nhi\r\nSUB bad.> 1\r\nSUB bad.x q 2\r\nSUB ok.> 4\r\nPUB ok.z 1\r\na\r\nPING\r\n',
    );
    await until(() => got.includes('PONG\r\n'), 10_000, 'PONG');
    // Recorded from /usr/sbin/nats-server 2.9.10 with the same permissions (publish allow ok.>, deny ok.no;
    // subscribe allow ok.>).
    assert.equal(
      got.slice(got.indexOf('\r\n') + 2),
      `-ERR 'Permissions Violation for Publish to "bad.x"'\r\n` +
        `-ERR 'Permissions Violation for Publish to "ok.no"'\r\n` +
        `-ERR 'Permissions Violation for Subscription to "bad.>"'\r\n` +
        `-ERR 'Permissions Violation for Subscription to "bad.x" using queue "q"'\r\n` +
        'MSG ok.z 4 1\r\na\r\nPONG\r\n',
    );
    assert.equal(s.adapter.stats.permissionViolations, 4);
    sock.destroy();
    // Verbose: a refused PUB or SUB gets the -ERR and no +OK (recorded from nats-server 2.9.10 as well).
    const v = connect(s.port, '127.0.0.1');
    let vgot = '';
    v.on('data', (b: Buffer) => (vgot += b.toString('latin1')));
    v.write('CONNECT {"user":"alice","pass":"wonder","verbose":true}\r\nPUB bad.x 2\r\nhi\r\nSUB bad.> 1\r\nPUB ok.a 1\r\nx\r\nPING\r\n');
    await until(() => vgot.includes('PONG\r\n'), 10_000, 'PONG');
    assert.equal(
      vgot.slice(vgot.indexOf('\r\n') + 2),
      `+OK\r\n-ERR 'Permissions Violation for Publish to "bad.x"'\r\n-ERR 'Permissions Violation for Subscription to "bad.>"'\r\n+OK\r\nPONG\r\n`,
    );
    v.destroy();
    await s.close();
    await a.close();
  });

  it('a wildcard reaching into denied topics is granted and filtered; `>` never delivers $ topics a policy does not name', async () => {
    const a = await makeAccess({ users, anonymous: false });
    await withPolicies(a);
    const s = await startNats({}, { access: a });
    const alice = await login(s.port, 'alice', 'wonder');
    alice.send('SUB > 1\r\n');
    await alice.flush();
    assert.deepEqual(alice.errors(), []);
    const { makeMessage } = await import('../../../src/core/index.js');
    for (const t of ['secret/x', '$SYS/y', 'ok/yes']) s.engine.publish(makeMessage(t, Buffer.from(t)));
    await alice.flush();
    assert.deepEqual(
      alice.msgs().map((m) => m.subject),
      ['ok.yes'],
    );
    alice.close();
    await s.close();
    await a.close();
  });

  it('a policy changed live applies to an open connection: its next publish is refused, its subscription stops receiving', async () => {
    const a = await makeAccess({ users, anonymous: false });
    await withPolicies(a);
    const s = await startNats({}, { access: a });
    const alice = await login(s.port, 'alice', 'wonder');
    alice.send('SUB ok.live 1\r\nSUB ok.marker 2\r\nPUB ok.live 1\r\n1\r\n');
    await alice.flush();
    assert.equal(alice.msgs().length, 1);
    await a.directory.putPolicy({ name: 'live', effect: 'deny', actions: ['publish', 'subscribe'], resources: ['topic:ok/live'], principals: ['user:alice'] });
    // Another client publishes on the subscribed topic, then a marker on an allowed one: the marker arrives, the
    // message on the now-denied topic did not.
    const bob = await login(s.port, 'carl', 'carl-pw');
    await a.directory.putPolicy({ name: 'bob', effect: 'allow', actions: ['publish'], resources: ['topic:#'], principals: ['user:carl'] });
    bob.send('PUB ok.live 1\r\n2\r\nPUB ok.marker 1\r\nm\r\n');
    await bob.flush();
    await alice.waitFor((o) => o.op === 'msg' && o.subject === 'ok.marker');
    assert.deepEqual(
      alice.msgs().map((m) => `${m.subject}:${m.payload.toString()}`),
      ['ok.live:1', 'ok.marker:m'],
    );
    alice.send('PUB ok.live 1\r\n3\r\n');
    await alice.flush();
    assert.deepEqual(alice.errors(), [`Permissions Violation for Publish to "ok.live"`]);
    alice.close();
    bob.close();
    await s.close();
    await a.close();
  });

  it('NATS subjects map onto policy filters: * → +, > → #, separators swapped', () => {
    assert.equal(natsFilterToUnified('a.*.>'), 'a/+/#');
    assert.equal(natsFilterToUnified('a/b.c'), 'a.b/c');
    assert.equal(natsFilterToUnified('>'), '#');
    assert.equal(natsFilterToUnified('x.a+b'), 'x/+');
  });
});

describe('NATS quotas and the client registry', () => {
  it("a namespace at its connection quota: nats-server's account limit error, and the lease is given back on close", async () => {
    const a = await makeAccess({ users, anonymous: false });
    await a.directory.putNamespace({ name: 'team', quotas: { maxConnections: 1 } });
    const s = await startNats({}, { access: a });
    const first = await login(s.port, 'bob', 'builder');
    const second = await RawClient.connect(s.port);
    second.send('CONNECT {"user":"bob","pass":"builder"}\r\nPING\r\n');
    await second.closed;
    assert.deepEqual(second.errors(), ['maximum account active connections exceeded']);
    assert.equal(s.adapter.stats.quotaRefusals, 1);
    // Another namespace is not affected.
    const alice = await login(s.port, 'alice', 'wonder');
    assert.deepEqual(alice.errors(), []);
    first.close();
    await until(() => a.access.quotas.figures().team?.connections === 0, 5000, 'lease released');
    const third = await login(s.port, 'bob', 'builder');
    assert.deepEqual(third.errors(), []);
    third.close();
    alice.close();
    await s.close();
    await a.close();
  });

  it('a publish rate quota holds the client back (reading paused) without dropping anything', async () => {
    const a = await makeAccess({ users, anonymous: false });
    await a.directory.putNamespace({ name: 'team', quotas: { publishRate: 1000 } });
    await a.directory.putPolicy({ name: 'bob', effect: 'allow', actions: ['publish', 'subscribe'], resources: ['topic:#'], principals: ['user:bob'] });
    const s = await startNats({}, { access: a });
    const bob = await login(s.port, 'bob', 'builder');
    bob.send('SUB q 1\r\n' + 'PUB q 1\r\nx\r\n'.repeat(1500));
    await bob.flush();
    assert.equal(bob.msgs().length, 1500);
    assert.ok(s.adapter.stats.quotaPauses >= 1, 'reading was paused');
    assert.ok(a.access.quotas.figures().team!.throttled >= 1);
    const e = a.access.clients.list().find((x) => x.user === 'bob')!;
    assert.equal(e.messagesIn, 1500);
    assert.equal(e.messagesOut, 1500);
    bob.close();
    await s.close();
    await a.close();
  });

  it('a bytes-out quota pauses the receiving connection', async () => {
    const a = await makeAccess({ users, anonymous: false });
    await a.directory.putNamespace({ name: 'team', quotas: { bytesOutRate: 1000 } });
    await a.directory.putPolicy({ name: 'all', effect: 'allow', actions: ['publish', 'subscribe'], resources: ['topic:#'], principals: ['everyone'] });
    const s = await startNats({}, { access: a });
    const bob = await login(s.port, 'bob', 'builder');
    bob.send('SUB q 1\r\n');
    await bob.flush();
    const alice = await login(s.port, 'dan', 'dan-pw');
    alice.send(`PUB q 3000\r\n${'y'.repeat(3000)}\r\n`);
    await alice.flush();
    await bob.waitFor((o) => o.op === 'msg');
    assert.ok(s.adapter.stats.quotaPauses >= 1);
    assert.ok(a.access.quotas.figures().team!.throttled >= 1);
    alice.close();
    bob.close();
    await s.close();
    await a.close();
  });

  it('kick closes the connection and removes it from the registry', async () => {
    const a = await makeAccess({ users, anonymous: false });
    const s = await startNats({}, { access: a });
    const alice = await login(s.port, 'alice', 'wonder');
    const e = a.access.clients.list().find((x) => x.user === 'alice')!;
    assert.equal(a.access.clients.kick(e.id), true);
    await alice.closed;
    await until(() => a.access.clients.get(e.id) === undefined, 5000, 'entry removed');
    assert.equal(a.access.quotas.figures().default?.connections, 0);
    await s.close();
    await a.close();
  });
});
