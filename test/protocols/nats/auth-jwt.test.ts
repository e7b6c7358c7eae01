/**
 * Operator mode's checks (src/protocols/nats/auth-jwt.ts) one by one, on JWTs made with nats-io's @nats-io/jwt: the
 * trust chain at load, then each reason a user JWT is refused (signature, nbf, connection type, src, bearer,
 * times, revocation of all users) and how permissions become the connection's own policies (scoped signing keys,
 * account default permissions, allow_responses without a publish allow list).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAccount, createOperator, createUser, encodeAccount, encodeOperator, encodeUser, type KeyPair, type User } from '@nats-io/jwt';
import { isFlowError } from '../../../src/core/index.js';
import { NatsOperators, permissionPolicies } from '../../../src/protocols/nats/auth-jwt.js';
import type { Principal } from '../../../src/control/index.js';

const LIMITS = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
const NONCE = 'bm9uY2Utbm9uY2U';

async function setup(account: Record<string, unknown> = {}, name = 'acme') {
  const dir = mkdtempSync(join(tmpdir(), 'nats-jwt-unit-'));
  const op = createOperator();
  const acc = createAccount();
  writeFileSync(join(dir, 'op.jwt'), await encodeOperator('op', op));
  mkdirSync(join(dir, 'accounts'));
  writeFileSync(join(dir, 'accounts', 'acc.jwt'), await encodeAccount(name, acc, { limits: LIMITS, ...account }, { signer: op }));
  return { dir, op, acc, operators: NatsOperators.load([join(dir, 'op.jwt')], [join(dir, 'accounts', 'acc.jwt')]) };
}

function connectOf(jwt: string, kp: KeyPair, sign = true) {
  return { jwt, ...(sign ? { sig: Buffer.from(kp.sign(Buffer.from(NONCE))).toString('base64url') } : {}) };
}

function refusal(r: ReturnType<NatsOperators['login']>): string | null {
  return 'refused' in r ? r.refused : null;
}

describe('NATS operator mode: loading the trust chain', () => {
  it('refuses a file without a JWT, a tampered operator JWT, and an account of another operator', async () => {
    const { dir } = await setup();
    writeFileSync(join(dir, 'empty.jwt'), 'nothing here');
    assert.throws(
      () => NatsOperators.load([join(dir, 'empty.jwt')], []),
      (e) => isFlowError(e, 'CONFIG_ERROR'),
    );
    const op = createOperator();
    const good = await encodeOperator('op', op);
    const [h, p, s] = good.split('.');
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>;
    claims.name = 'someone else';
    writeFileSync(join(dir, 'bad.jwt'), `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}`);
    assert.throws(() => NatsOperators.load([join(dir, 'bad.jwt')], []), /not an operator JWT signed by its operator/);
    const other = createOperator();
    writeFileSync(join(dir, 'other.jwt'), await encodeAccount('x', createAccount(), { limits: LIMITS }, { signer: other }));
    assert.throws(() => NatsOperators.load([join(dir, 'op.jwt')], [join(dir, 'other.jwt')]), /not an account JWT signed by a configured operator/);
  });

  it('reads every account JWT of a directory; a name no namespace can take is the account key', async () => {
    const { dir, acc } = await setup({}, 'has space');
    const n = NatsOperators.load([join(dir, 'op.jwt')], [join(dir, 'accounts')]);
    assert.equal(n.accountCount, 1);
    assert.equal(n.namespaceOf(acc.getPublicKey()), acc.getPublicKey());
  });
});

describe('NATS operator mode: user JWTs', () => {
  it('logs in a user of the account with its nonce signature; the principal carries its own policies', async () => {
    const { operators, acc } = await setup();
    const u = createUser();
    const r = operators.login(connectOf(await encodeUser('u', u, acc), u), NONCE, '127.0.0.1', false);
    assert.equal(refusal(r), null);
    const p = (r as { principal: Principal }).principal;
    assert.equal(p.user, u.getPublicKey());
    assert.equal(p.namespace, 'acme');
    assert.ok(p.own?.allows(p, 'publish', 'topic', 'any/thing'));
  });

  it('refuses a tampered user JWT, one not valid yet, a bad or missing nonce signature', async () => {
    const { operators, acc } = await setup();
    const u = createUser();
    const jwt = await encodeUser('u', u, acc);
    const [h, p, s] = jwt.split('.');
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString()) as { nats: Record<string, unknown> };
    claims.nats.pub = { allow: ['>'] };
    const tampered = `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}`;
    assert.equal(refusal(operators.login(connectOf(tampered, u), NONCE, '127.0.0.1', false)), 'user JWT signature');
    const later = await encodeUser('u', u, acc, {}, { nbf: Math.floor(Date.now() / 1000) + 3600 });
    assert.equal(refusal(operators.login(connectOf(later, u), NONCE, '127.0.0.1', false)), 'user JWT expired or not yet valid');
    assert.equal(refusal(operators.login(connectOf(jwt, u), 'another-nonce', '127.0.0.1', false)), 'nonce signature');
    assert.equal(refusal(operators.login(connectOf(jwt, u, false), NONCE, '127.0.0.1', false)), 'nonce signature');
    assert.equal(refusal(operators.login({ jwt: 'not.a.jwt' }, NONCE, '127.0.0.1', false)), 'not a user JWT');
  });

  it('connection types, src addresses and time limits', async () => {
    const { operators, acc } = await setup();
    const u = createUser();
    const login = async (user: Partial<User>, remote = '127.0.0.1', ws = false) =>
      refusal(operators.login(connectOf(await encodeUser('u', u, acc, user), u), NONCE, remote, ws));
    assert.equal(await login({ allowed_connection_types: ['WEBSOCKET'] }), 'connection type not allowed');
    assert.equal(await login({ allowed_connection_types: ['WEBSOCKET'] }, '127.0.0.1', true), null);
    assert.equal(await login({ src: ['10.0.0.0/8'] }), 'address not allowed by src');
    assert.equal(await login({ src: ['127.0.0.0/8'] }), null);
    assert.equal(await login({ times: [{ start: '00:00:00', end: '23:59:59' }] }), 'times limits are not supported');
  });

  it('a bearer token needs no signature unless its account disallows bearer tokens', async () => {
    const allowed = await setup();
    const u = createUser();
    const jwt = await encodeUser('u', u, allowed.acc, { bearer_token: true });
    assert.equal(refusal(allowed.operators.login(connectOf(jwt, u, false), NONCE, '127.0.0.1', false)), null);
    const strict = await setup({ disallow_bearer: true });
    const jwt2 = await encodeUser('u', u, strict.acc, { bearer_token: true });
    assert.equal(refusal(strict.operators.login(connectOf(jwt2, u, false), NONCE, '127.0.0.1', false)), 'nonce signature');
  });

  it('revocations: a user key, or every user (*) issued before the time', async () => {
    const u = createUser();
    const now = Math.floor(Date.now() / 1000);
    const all = await setup({ revocations: { '*': now + 60 } });
    assert.equal(refusal(all.operators.login(connectOf(await encodeUser('u', u, all.acc), u), NONCE, '127.0.0.1', false)), 'user JWT revoked');
    const past = await setup({ revocations: { [u.getPublicKey()]: now - 3600 } });
    // Revoked before this JWT was issued: a JWT issued since is valid.
    assert.equal(refusal(past.operators.login(connectOf(await encodeUser('u', u, past.acc), u), NONCE, '127.0.0.1', false)), null);
  });

  it("a scoped signing key's template replaces the user's permissions; account default permissions fill in", async () => {
    const sk = createAccount();
    const { operators, acc } = await setup({
      signing_keys: [{ kind: 'user_scope', key: sk.getPublicKey(), role: 'r', template: { pub: { allow: ['scoped.>'] }, sub: { allow: ['scoped.>'] } } }],
      default_permissions: { pub: { allow: ['default.>'] } },
    });
    const u = createUser();
    const scoped = operators.login(connectOf(await encodeUser('u', u, acc, { pub: { allow: ['>'] } }, { signer: sk }), u), NONCE, '127.0.0.1', false);
    const p = (scoped as { principal: Principal }).principal;
    assert.ok(p.own!.allows(p, 'publish', 'topic', 'scoped/x'));
    assert.ok(!p.own!.allows(p, 'publish', 'topic', 'other'));
    const plain = operators.login(connectOf(await encodeUser('u', u, acc), u), NONCE, '127.0.0.1', false);
    const q = (plain as { principal: Principal }).principal;
    assert.ok(q.own!.allows(q, 'publish', 'topic', 'default/x'));
    assert.ok(!q.own!.allows(q, 'publish', 'topic', 'other'));
  });
});

describe('NATS permissions as policies', () => {
  const p: Principal = { user: 'u', groups: [], namespace: 'default' };

  it('allow lists, deny lists (deny wins), and everything when a list is empty', () => {
    const { own } = permissionPolicies({ pub: { allow: ['a.*'], deny: ['a.b'] }, sub: { deny: ['s.>'] } });
    assert.ok(own.allows(p, 'publish', 'topic', 'a/x'));
    assert.ok(!own.allows(p, 'publish', 'topic', 'a/b'));
    assert.ok(!own.allows(p, 'publish', 'topic', 'b'));
    assert.equal(own.subscription(p, 'x/#'), 'allow');
    assert.equal(own.subscription(p, 's/#'), 'deny');
    assert.ok(own.allows(p, 'subscribe', 'stream', 'ORDERS'));
    assert.ok(!own.allows(p, 'respond', 'topic', 'a/x'));
  });

  it('"subject queue" entries: that subject in that queue group only (the $nats-queue topic), a deny likewise', () => {
    const { own } = permissionPolicies({ sub: { allow: ['q A', 'r.>'], deny: ['r.x B'] } });
    assert.equal(own.subscription(p, 'q'), 'deny', 'no plain subscription to q');
    assert.equal(own.subscription(p, '$nats-queue/A/q'), 'allow');
    assert.equal(own.subscription(p, '$nats-queue/bad/q'), 'deny');
    assert.equal(own.subscription(p, 'r/x'), 'allow', 'the queue deny leaves plain r.x');
    assert.ok(own.deniesWithin(p, 'subscribe', '$nats-queue/B/r/x'));
    assert.ok(!own.deniesWithin(p, 'subscribe', '$nats-queue/C/r/x'));
  });

  it('resp: respond allowed, no blanket publish, max and ttl (ns) as given or nats-server defaults', () => {
    const r = permissionPolicies({ sub: { allow: ['svc.>'] }, resp: { max: 3, ttl: 5_000_000_000 } });
    assert.ok(r.own.allows(p, 'respond', 'topic', 'svc/a'));
    assert.ok(!r.own.allows(p, 'publish', 'topic', 'anything'));
    assert.deepEqual(r.responses, { max: 3, ttlMs: 5000 });
    assert.deepEqual(permissionPolicies({ resp: { max: 0, ttl: 0 } }).responses, { max: 1, ttlMs: 120_000 });
    assert.equal(permissionPolicies({}).responses, undefined);
  });
});
