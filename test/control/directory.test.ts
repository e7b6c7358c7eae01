/**
 * The Directory (src/control/directory.ts) over a ControlStore: users and their derived credentials, groups, API
 * tokens (expiry, deletion with their user), policies (invalid documents left out), namespaces and quotas, and
 * two Directory objects on one store (two brokers) seeing each other's changes through refresh().
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createAccount, createUser } from 'nkeys.js';
import { isFlowError } from '../../src/core/index.js';
import { Directory, PasswordVerifier, TOKEN_PREFIX } from '../../src/control/index.js';
import { MemoryControlStore, type ControlKind, type ControlRecord, type ControlStore } from '../../src/storage/metastore/control-store.js';

const CHEAP = { N: 1024, r: 8, p: 1 };
const verifier = new PasswordVerifier({ scrypt: CHEAP });
after(() => verifier.close());

const code = (c: Parameters<typeof isFlowError>[1]) => (e: unknown) => isFlowError(e, c);

async function dir(store: ControlStore = new MemoryControlStore(), now?: () => number): Promise<Directory> {
  return Directory.open({ store, hasher: (p) => verifier.hash(p), scramIterations: 4096, now });
}

describe('Directory: users', () => {
  it('adds a user with SCRAM credentials and a scrypt hash, never the password', async () => {
    const store = new MemoryControlStore();
    const d = await dir(store);
    const info = await d.addUser({ username: 'alice@example.com', password: 's3cret-pass', groups: ['ops'] });
    assert.deepEqual(
      { ...info, createdAt: 0 },
      {
        username: 'alice@example.com',
        groups: ['ops'],
        namespace: 'default',
        mechanisms: ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512'],
        createdAt: 0,
        source: 'api',
      },
    );
    const rec = d.lookup('alice@example.com');
    assert.ok(rec);
    assert.equal(await verifier.verify('s3cret-pass', rec.passwordHash), 'ok');
    assert.equal(await verifier.verify('wrong', rec.passwordHash), 'bad');
    assert.equal(rec.scram('SCRAM-SHA-256')?.iterations, 4096);
    assert.equal(rec.scram('SCRAM-SHA-512')?.storedKey.length, 64);
    const stored = JSON.stringify(await store.listControl('user'));
    assert.ok(!stored.includes('s3cret-pass'), 'the password is not in the store');
    assert.equal(d.size, 1);
    assert.deepEqual(d.principal('alice@example.com'), { user: 'alice@example.com', groups: ['ops'], namespace: 'default' });
  });

  it('keeps a NATS nkey: a user with a key and no password, one key per user, changed and removed', async () => {
    const d = await dir();
    const k1 = createUser().getPublicKey();
    const k2 = createUser().getPublicKey();
    const info = await d.addUser({ username: 'svc', nkey: k1 });
    assert.equal(info.nkey, k1);
    assert.deepEqual(info.mechanisms, ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512', 'NKEY']);
    assert.equal(d.userByNkey(k1), 'svc');
    assert.equal(d.nkeyUsers, 1);
    // Its password is random: no password logs it in (an empty one is no password at all).
    assert.equal(await verifier.verify('', d.lookup('svc')!.passwordHash), 'bad');
    await assert.rejects(d.addUser({ username: 'other', nkey: k1 }), code('ALREADY_EXISTS'));
    await assert.rejects(d.addUser({ username: 'none' }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.addUser({ username: 'bad', nkey: 'UABC' }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.addUser({ username: 'acct', nkey: createAccount().getPublicKey() }), code('INVALID_ARGUMENT'));
    await d.setNkey('svc', k2);
    assert.equal(d.userByNkey(k1), undefined);
    assert.equal(d.userByNkey(k2), 'svc');
    await d.setNkey('svc', null);
    assert.equal(d.userByNkey(k2), undefined);
    assert.equal(d.user('svc')!.nkey, undefined);
  });

  it('refuses duplicates, bad names, bad passwords and unknown namespaces', async () => {
    const d = await dir();
    await d.addUser({ username: 'bob', password: 'pw' });
    await assert.rejects(d.addUser({ username: 'bob', password: 'other' }), code('ALREADY_EXISTS'));
    await assert.rejects(d.addUser({ username: 'a:b', password: 'pw' }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.addUser({ username: '', password: 'pw' }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.addUser({ username: 'c', password: '' }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.addUser({ username: 'c', password: 'pw', groups: ['bad group'] }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.addUser({ username: 'c', password: 'pw', namespace: 'nowhere' }), code('NOT_FOUND'));
    assert.deepEqual(
      d.listUsers().map((u) => u.username),
      ['bob'],
    );
  });

  it('changes a password, groups and namespace; deletes', async () => {
    const d = await dir();
    await d.addUser({ username: 'carol', password: 'one' });
    const v = d.version;
    await d.setPassword('carol', 'two');
    assert.ok(d.version > v, 'a change bumps the version');
    assert.equal(await verifier.verify('two', d.lookup('carol')!.passwordHash), 'ok');
    assert.equal(await verifier.verify('one', d.lookup('carol')!.passwordHash), 'bad');
    assert.equal(d.passwordSource('carol'), 'api');
    await d.putNamespace({ name: 'team-a' });
    const u = await d.updateUser('carol', { groups: ['g1', 'g2'], namespace: 'team-a' });
    assert.deepEqual([u.groups, u.namespace], [['g1', 'g2'], 'team-a']);
    await assert.rejects(d.updateUser('carol', { namespace: 'nope' }), code('NOT_FOUND'));
    await assert.rejects(d.updateUser('nobody', { groups: [] }), code('NOT_FOUND'));
    await assert.rejects(d.setPassword('nobody', 'x'), code('NOT_FOUND'));
    await d.deleteUser('carol');
    assert.equal(d.lookup('carol'), undefined);
    await assert.rejects(d.deleteUser('carol'), code('NOT_FOUND'));
    // A deleted user's principal is marked removed: allowed nothing, even what user:carol policies name.
    assert.deepEqual(d.principal('carol'), { user: 'carol', groups: [], namespace: 'default', removed: true });
  });

  it('seedUser adds once and leaves an existing user alone', async () => {
    const d = await dir();
    assert.equal(await d.seedUser({ username: 'f', password: 'p1', groups: ['admins'] }), true);
    assert.equal(await d.seedUser({ username: 'f', password: 'p2' }), false);
    assert.equal(d.user('f')?.source, 'file');
    assert.equal(d.passwordSource('f'), 'file');
    assert.equal(await verifier.verify('p1', d.lookup('f')!.passwordHash), 'ok');
  });
});

describe('Directory: groups and namespaces', () => {
  it('lists defined groups and groups that only have members; refuses deleting a group in use', async () => {
    const d = await dir();
    await d.putGroup({ name: 'ops', description: 'operators' });
    await d.addUser({ username: 'u1', password: 'p', groups: ['devs'] });
    await d.addUser({ username: 'u2', password: 'p', groups: ['devs', 'ops'] });
    assert.deepEqual(
      d.listGroups().map((g) => [g.name, g.description, g.members]),
      [
        ['devs', undefined, ['u1', 'u2']],
        ['ops', 'operators', ['u2']],
      ],
    );
    await assert.rejects(d.deleteGroup('ops'), code('INVALID_ARGUMENT'));
    await d.updateUser('u2', { groups: ['devs'] });
    await d.deleteGroup('ops');
    await assert.rejects(d.deleteGroup('ops'), code('NOT_FOUND'));
    await assert.rejects(d.putGroup({ name: 'no spaces' }), code('INVALID_ARGUMENT'));
  });

  it('namespaces: default always exists, quotas validated, in-use and default ones not deleted', async () => {
    const d = await dir();
    assert.deepEqual(
      d.listNamespaces().map((n) => n.name),
      ['default'],
    );
    const ns = await d.putNamespace({ name: 'team-a', quotas: { maxConnections: 2, publishRate: 100 } });
    assert.deepEqual(ns.quotas, { maxConnections: 2, publishRate: 100 });
    await d.putNamespace({ name: 'team-a', quotas: { bytesInRate: 5 } });
    assert.deepEqual(d.namespace('team-a')?.quotas, { bytesInRate: 5 }, 'quotas replaced as a whole');
    await assert.rejects(d.putNamespace({ name: 'x', quotas: { maxConnections: -1 } }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.putNamespace({ name: 'x', quotas: { connections: 1 } as never }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.putNamespace({ name: 'x', quotas: { publishRate: Number.NaN } }), code('INVALID_ARGUMENT'));
    await assert.rejects(d.deleteNamespace('default'), code('INVALID_ARGUMENT'));
    await d.addUser({ username: 'a', password: 'p', namespace: 'team-a' });
    await assert.rejects(d.deleteNamespace('team-a'), code('INVALID_ARGUMENT'));
    await d.deleteUser('a');
    await d.deleteNamespace('team-a');
    await assert.rejects(d.deleteNamespace('team-a'), code('NOT_FOUND'));
  });

  it('a namespace document with invalid quotas (written by something else) applies none', async () => {
    const store = new MemoryControlStore();
    await store.putControl('namespace', 'odd', { quotas: { maxConnections: 'many' }, createdAt: 1 });
    const d = await dir(store);
    assert.deepEqual(d.namespace('odd')?.quotas, {});
  });
});

describe('Directory: tokens', () => {
  it('creates, verifies, expires and deletes tokens; stores only their hash', async () => {
    let now = 1_000_000;
    const store = new MemoryControlStore();
    const d = await dir(store, () => now);
    await d.addUser({ username: 'alice', password: 'p' });
    const { token, info } = await d.createToken({ user: 'alice', description: 'ci', ttlMs: 60_000 });
    assert.ok(token.startsWith(`${TOKEN_PREFIX}${info.id}.`));
    assert.deepEqual({ ...info }, { id: info.id, user: 'alice', description: 'ci', createdAt: 1_000_000, expiresAt: 1_060_000 });
    assert.ok(!JSON.stringify(await store.listControl('token')).includes(token.split('.')[1]), 'the secret is not stored');
    assert.deepEqual(d.verifyToken(token), { user: 'alice', id: info.id });
    assert.equal(d.verifyToken(token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A')), null, 'another secret');
    assert.equal(d.verifyToken(`${TOKEN_PREFIX}${info.id}`), null, 'no secret');
    assert.equal(d.verifyToken('fmq_unknown.secret'), null);
    assert.equal(d.verifyToken('Bearer-ish'), null);
    now = 1_059_999;
    assert.ok(d.verifyToken(token));
    now = 1_060_000;
    assert.equal(d.verifyToken(token), null, 'expired');
    const forever = await d.createToken({ user: 'alice' });
    assert.equal(forever.info.expiresAt, null);
    assert.deepEqual(
      d
        .listTokens('alice')
        .map((t) => t.id)
        .sort(),
      [info.id, forever.info.id].sort(),
    );
    assert.deepEqual(d.listTokens('bob'), []);
    await d.deleteToken(forever.info.id);
    assert.equal(d.verifyToken(forever.token), null);
    await assert.rejects(d.deleteToken(forever.info.id), code('NOT_FOUND'));
    await assert.rejects(d.createToken({ user: 'nobody' }), code('NOT_FOUND'));
    for (const ttlMs of [0, -5, 1.5, Number.NaN]) await assert.rejects(d.createToken({ user: 'alice', ttlMs }), code('INVALID_ARGUMENT'), `ttl ${ttlMs}`);
  });

  it('a damaged token document does not make verification throw', async () => {
    const store = new MemoryControlStore();
    const d = await dir(store);
    await d.addUser({ username: 'alice', password: 'p' });
    const { token, info } = await d.createToken({ user: 'alice' });
    await store.putControl('token', info.id, { user: 'alice', createdAt: 1, expiresAt: null, hash: 'c2hvcnQ=' });
    await d.refresh();
    assert.equal(d.verifyToken(token), null);
  });

  it('deleting a user deletes its tokens, also those made through another broker since the last refresh', async () => {
    const store = new MemoryControlStore();
    const a = await dir(store);
    const b = await dir(store);
    await a.addUser({ username: 'alice', password: 'p' });
    await b.refresh();
    const { token } = await a.createToken({ user: 'alice' });
    await b.deleteUser('alice'); // b has not seen the token
    await a.addUser({ username: 'alice', password: 'new owner' });
    assert.equal(a.verifyToken(token), null, 'the old token does not open the new account');
    assert.deepEqual(await store.listControl('token'), []);
  });
});

describe('Directory: policies', () => {
  it('validates, stores, compiles and deletes policies', async () => {
    const d = await dir();
    assert.equal(d.policies.open, true);
    const p = await d.putPolicy({ name: 'p1', effect: 'allow', actions: ['publish'], resources: ['topic:a/#'], principals: ['user:alice'] });
    assert.ok(p.createdAt > 0);
    assert.equal(d.policies.size, 1);
    assert.equal(d.policies.open, false);
    assert.equal(d.policies.allows({ user: 'alice', groups: [], namespace: 'default' }, 'publish', 'topic', 'a/b'), true);
    await assert.rejects(
      d.putPolicy({ name: 'bad', effect: 'allow', actions: ['fly'], resources: ['topic:a'], principals: ['everyone'] }),
      code('INVALID_ARGUMENT'),
    );
    await d.deletePolicy('p1');
    assert.equal(d.policies.size, 0);
    await assert.rejects(d.deletePolicy('p1'), code('NOT_FOUND'));
  });

  it('leaves out (and does not fail on) invalid policy and user documents found in the store', async () => {
    const store = new MemoryControlStore();
    await store.putControl('policy', 'good', { effect: 'deny', actions: ['*'], resources: ['*:*'], principals: ['user:x'], createdAt: 1 });
    await store.putControl('policy', 'bad', { effect: 'sometimes', actions: ['*'], resources: ['*:*'], principals: ['everyone'] });
    await store.putControl('policy', 'worse', { hello: 'world' });
    await store.putControl('user', 'broken', { groups: [] });
    const d = await dir(store);
    assert.deepEqual(
      d.policies.defs().map((p) => p.name),
      ['good'],
    );
    assert.equal(d.lookup('broken'), undefined);
  });

  it('takes the default policy mode', async () => {
    const d = await Directory.open({ store: new MemoryControlStore(), hasher: (p) => verifier.hash(p), defaultPolicy: 'deny' });
    assert.equal(d.policies.open, false);
    assert.equal(d.policies.allows({ user: 'a', groups: [], namespace: 'default' }, 'publish', 'topic', 'x'), false);
  });
});

describe('Directory: two brokers on one store', () => {
  it("refresh() picks up the other one's changes, bumps the version and tells listeners; nothing when unchanged", async () => {
    const store = new MemoryControlStore();
    const a = await dir(store);
    const b = await dir(store);
    let changes = 0;
    b.onChange(() => changes++);
    await a.addUser({ username: 'alice', password: 'p', groups: ['ops'] });
    await a.putPolicy({ name: 'p', effect: 'allow', actions: ['*'], resources: ['*:*'], principals: ['group:ops'] });
    assert.equal(b.lookup('alice'), undefined, 'not before a refresh');
    const v = b.version;
    await b.refresh();
    assert.ok(b.lookup('alice'));
    assert.equal(b.policies.size, 1);
    assert.ok(b.version > v);
    assert.equal(changes, 1);
    await b.refresh();
    assert.equal(changes, 1, 'no reload when the store did not change');
    await a.updateUser('alice', { groups: [] });
    await b.refresh();
    assert.deepEqual(b.principal('alice').groups, []);
  });

  it('a slow refresh that read the store before a local change does not undo it', async () => {
    // A store whose user list can be held after it was read: the refresh's copy is then older than the write.
    const inner = new MemoryControlStore();
    let gate: Promise<void> | null = null;
    const store: ControlStore = {
      listControl: async (kind: ControlKind): Promise<ControlRecord[]> => {
        const rows = await inner.listControl(kind);
        if (kind === 'user' && gate) await gate;
        return rows;
      },
      getControl: (k, n) => inner.getControl(k, n),
      putControl: (k, n, d) => inner.putControl(k, n, d),
      putControlIfAbsent: (k, n, d) => inner.putControlIfAbsent(k, n, d),
      deleteControl: (k, n) => inner.deleteControl(k, n),
      controlVersion: () => inner.controlVersion(),
    };
    const other = await dir(inner);
    const d = await dir(store);
    await other.putGroup({ name: 'g' }); // the store's version moves: d's refresh reloads
    let open!: () => void;
    gate = new Promise<void>((r) => (open = r));
    const refreshing = d.refresh();
    await new Promise((r) => setImmediate(r)); // the refresh has read the (userless) list and waits at the gate
    gate = null;
    const adding = d.addUser({ username: 'late', password: 'p' });
    // Until the write is in the store, and a few turns more for the reload after it to read the store.
    while ((await inner.getControl('user', 'late')) === null) await new Promise((r) => setImmediate(r));
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    open();
    await Promise.all([refreshing, adding]);
    assert.ok(d.lookup('late'), 'the user added during the refresh is there');
    assert.deepEqual(
      d.listGroups().map((g) => g.name),
      ['g'],
    );
  });
});

describe('Directory: RabbitMQ users', () => {
  it('a user with a RabbitMQ hash only; its RabbitMQ permission policies go when it is deleted, other policies stay', async () => {
    const d = await dir();
    // A hash RabbitMQ 3.10.8 made of "p1".
    const hash = { algorithm: 'rabbit_password_hashing_sha256' as const, hash: 'xLrBTbVBTCuLhgwbkwg8NhbGn/frG7EittRDT58aXCv2kAhg' };
    assert.equal(await d.putRabbitUser({ username: 'r', hash, groups: ['admins'] }), true);
    assert.deepEqual(d.lookup('r')?.rabbitOnly, hash);
    assert.deepEqual(d.user('r')?.mechanisms, ['PLAIN']);
    assert.equal(await d.putRabbitUser({ username: 'r', password: 'new-pw', groups: [] }), false);
    assert.equal(d.lookup('r')?.rabbitOnly, undefined, 'a clear password gives FlowMQ credentials');
    assert.notEqual(d.rabbitHash('r')?.hash, hash.hash);
    const mine = { effect: 'allow' as const, actions: ['subscribe'], resources: ['queue:~^r$'], principals: ['user:r'], source: 'rabbitmq-permission' };
    await d.putPolicy({ ...mine, name: 'rabbitmq.r.read' });
    await d.putPolicy({ ...mine, name: 'kept', source: 'api' });
    await d.deleteUser('r');
    assert.deepEqual(
      d.policies.defs().map((p) => p.name),
      ['kept'],
    );
  });
});
