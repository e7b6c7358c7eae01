/**
 * NATS NKey and JWT (operator mode) logins, their permissions and allow_responses, with the `nats` client's own
 * authenticators (nkeyAuthenticator, jwtAuthenticator, credsAuthenticator), against `bin/flowmq` and, side by side
 * with the same keys and JWTs, Debian's nats-server 2.9.10 (one started in operator mode with a MEMORY resolver and
 * resolver_preload, one with nkey users and permissions): every scenario must end the same way on both, and the way
 * written down here. Tokens are made with nats-io's `@nats-io/jwt`; nothing here encodes a key or a JWT by hand.
 *
 * Denials are proved absolute with a marker sent after the denied message on the same path: once the marker
 * arrived, the denied message would have arrived before it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, credsAuthenticator, jwtAuthenticator, nkeyAuthenticator, StringCodec, type NatsConnection, type Status } from 'nats';
import { createAccount, createOperator, createUser, encodeAccount, encodeOperator, encodeUser, fmtCreds, type KeyPair, type User } from '@nats-io/jwt';
import { FlowmqProcess, eventually, freePort } from './harness.js';
import { RawNats } from './nats-wire.js';

const sc = StringCodec();
// JetStream on without limits (-1): an account JWT without JetStream limits has no JetStream, as on nats-server.
const LIMITS = {
  ...{ subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 },
  ...{ mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 },
};

/** The status events of a connection, collected as they come. */
function statuses(nc: NatsConnection): Status[] {
  const out: Status[] = [];
  void (async () => {
    for await (const s of nc.status()) out.push(s);
  })();
  return out;
}

const violations = (st: Status[]) =>
  st
    .filter((s) => s.data === 'PERMISSIONS_VIOLATION')
    .map((s) => {
      const c = (s as { permissionContext?: { operation: string; subject: string } }).permissionContext;
      return `${c?.operation} ${c?.subject}`;
    });

/** Connects and answers 'ok' or the client's error code (the connection is closed either way). */
async function outcome(port: number, opts: Record<string, unknown>): Promise<string> {
  try {
    const nc = await connect({ servers: `127.0.0.1:${port}`, reconnect: false, ...opts });
    await nc.close();
    return 'ok';
  } catch (err) {
    return String((err as { code?: string }).code ?? (err as Error).message);
  }
}

interface Keys {
  operator: KeyPair;
  operatorSigner: KeyPair;
  acme: KeyPair;
  acmeSigner: KeyPair;
  stranger: KeyPair;
  users: Record<string, KeyPair>;
  jwts: Record<string, string>;
  operatorJwt: string;
  accountJwts: Record<string, string>;
  /** nats' v1 format (see v1Jwt): the operator, an account, a user of it and one signed by a stranger account. */
  v1: { operatorJwt: string; account: KeyPair; accountJwt: string; user: KeyPair; userJwt: string; strangerUserJwt: string };
  /** An account whose JWT expires 15 s after the keys are made (time for both servers to start on a loaded machine), and a bearer user of it. */
  brief: { account: KeyPair; accountJwt: string; userJwt: string };
}

/**
 * A JWT in nats' v1 format, as nats-server 2.9 still accepts it (nats.js's auth tests use such tokens): `type` at
 * the top level of the claims, no `nats.version`, the header's alg `ed25519`, the signature over the claims part alone. @nats-io/jwt writes v2 only, so the
 * claims are laid out here and signed with the issuer's KeyPair.
 */
function v1Jwt(issuer: KeyPair, subject: string, type: string, name: string, nats: object): string {
  const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const claims = {
    jti: `v1${Math.random().toString(36).slice(2)}`,
    iat: Math.floor(Date.now() / 1000) - 5,
    iss: issuer.getPublicKey(),
    name,
    sub: subject,
    type,
    nats,
  };
  // v1 signs the claims part alone.
  const payload = b64(claims);
  return `${b64({ typ: 'jwt', alg: 'ed25519' })}.${payload}.${Buffer.from(issuer.sign(Buffer.from(payload))).toString('base64url')}`;
}

async function makeKeys(): Promise<Keys> {
  const operator = createOperator();
  const operatorSigner = createOperator();
  const acme = createAccount();
  const acmeSigner = createAccount();
  const strangerOperator = createOperator();
  const stranger = createAccount();
  const users: Record<string, KeyPair> = {};
  for (const n of ['full', 'limited', 'responder', 'expired', 'revoked', 'scoped', 'outsider', 'other']) users[n] = createUser();
  const now = Math.floor(Date.now() / 1000);
  const operatorJwt = await encodeOperator('flowmq-test', operator, { signing_keys: [operatorSigner.getPublicKey()] });
  // acme is signed by the operator's signing key; its own signing key signs the `scoped` user.
  const acmeJwt = await encodeAccount(
    'acme',
    acme,
    { limits: LIMITS, signing_keys: [acmeSigner.getPublicKey()], revocations: { [users.revoked!.getPublicKey()]: now + 3600 } },
    { signer: operatorSigner },
  );
  const strangerJwt = await encodeAccount('stranger', stranger, { limits: LIMITS }, { signer: strangerOperator });
  const user = (name: string, u: Partial<User> = {}, opts: Record<string, unknown> = {}) => encodeUser(name, users[name]!, acme, u, opts);
  const jwts: Record<string, string> = {
    full: await user('full'),
    limited: await user('limited', { pub: { allow: ['orders.>'], deny: ['orders.secret'] }, sub: { allow: ['orders.>', '_INBOX.>'] } }),
    responder: await user('responder', { sub: { allow: ['svc.>'] }, resp: { max: 1, ttl: 0 } }),
    expired: await user('expired', {}, { exp: now - 60 }),
    revoked: await user('revoked'),
    scoped: await encodeUser('scoped', users.scoped!, acme, {}, { signer: acmeSigner }),
    outsider: await encodeUser('outsider', users.outsider!, stranger),
  };
  const v1Account = createAccount();
  const v1User = createUser();
  const v1 = {
    // The same operator and signing key as operatorJwt's (nats-server 2.9.10 reads one operator file): nats-server
    // gets this one, FlowMQ both.
    operatorJwt: v1Jwt(operator, operator.getPublicKey(), 'operator', 'v1-operator', { signing_keys: [operatorSigner.getPublicKey()] }),
    account: v1Account,
    accountJwt: v1Jwt(operatorSigner, v1Account.getPublicKey(), 'account', 'v1acct', { limits: LIMITS }),
    user: v1User,
    userJwt: v1Jwt(v1Account, v1User.getPublicKey(), 'user', 'v1-user', { pub: {}, sub: {} }),
    strangerUserJwt: v1Jwt(stranger, v1User.getPublicKey(), 'user', 'v1-stranger', { pub: {}, sub: {} }),
  };
  const briefAccount = createAccount();
  const brief = {
    account: briefAccount,
    accountJwt: await encodeAccount('brief', briefAccount, { limits: LIMITS }, { signer: operator, exp: now + 15 }),
    userJwt: await encodeUser('brief-user', createUser(), briefAccount, { bearer_token: true }),
  };
  return {
    v1,
    brief,
    operator,
    operatorSigner,
    acme,
    acmeSigner,
    stranger,
    users,
    jwts,
    operatorJwt,
    accountJwts: { [acme.getPublicKey()]: acmeJwt, [stranger.getPublicKey()]: strangerJwt },
  };
}

/** What one server does with the JWT logins and permissions (the same list for FlowMQ and nats-server). */
async function jwtScenario(port: number, k: Keys): Promise<Record<string, unknown>> {
  const r: Record<string, unknown> = {};
  const creds = (n: string) => credsAuthenticator(fmtCreds(k.jwts[n]!, k.users[n]!));
  r.full = await outcome(port, { authenticator: creds('full') });
  r.jwtAuthenticator = await outcome(port, { authenticator: jwtAuthenticator(k.jwts.full!, k.users.full!.getSeed()) });
  r.scoped = await outcome(port, { authenticator: creds('scoped') });
  r.expired = await outcome(port, { authenticator: creds('expired') });
  r.revoked = await outcome(port, { authenticator: creds('revoked') });
  r.outsider = await outcome(port, { authenticator: creds('outsider') });
  // A valid JWT with another key's seed: the nonce signature is not the JWT subject's.
  r.wrongSeed = await outcome(port, { authenticator: jwtAuthenticator(k.jwts.full!, k.users.other!.getSeed()) });
  r.noCredentials = await outcome(port, {});
  r.password = await outcome(port, { user: 'full', pass: 'x' });
  Object.assign(r, await permissions(port, { authenticator: creds('full') }, { authenticator: creds('limited') }, { authenticator: creds('responder') }));
  // A JWT's subject permissions cover the JetStream API's subjects too.
  const lim = await connect({ servers: `127.0.0.1:${port}`, reconnect: false, authenticator: creds('limited') });
  try {
    const st = statuses(lim);
    lim.publish('$JS.API.STREAM.CREATE.X', sc.encode('{"name":"X","subjects":["x.>"]}'));
    await eventually(() => violations(st).length > 0, 10_000, 'the JetStream API refusal');
    r.limitedJsApi = violations(st);
  } finally {
    await lim.close();
  }
  return r;
}

/**
 * Permissions of `limited` (pub orders.> but not orders.secret, sub orders.> and _INBOX.>) and allow_responses of
 * `responder` (sub svc.>, one reply per request, no publish otherwise), watched by an unrestricted connection.
 */
async function permissions(port: number, full: object, limited: object, responder: object): Promise<Record<string, unknown>> {
  const r: Record<string, unknown> = {};
  const server = `127.0.0.1:${port}`;
  const watcher = await connect({ servers: server, reconnect: false, ...full });
  const lim = await connect({ servers: server, reconnect: false, ...limited });
  const resp = await connect({ servers: server, reconnect: false, ...responder });
  try {
    const limSt = statuses(lim);
    const seen: string[] = [];
    const all = watcher.subscribe('orders.>', { callback: (_e, m) => seen.push(`${m.subject}=${sc.decode(m.data)}`) });
    void all;
    await watcher.flush();
    lim.publish('orders.secret', sc.encode('denied'));
    lim.publish('payments.x', sc.encode('denied'));
    lim.publish('orders.ok', sc.encode('marker'));
    await eventually(() => seen.includes('orders.ok=marker'), 10_000, 'the marker');
    r.limitedDelivered = [...seen];
    // A denied subscription: the message published after it never reaches the client.
    const got: string[] = [];
    // The client hands the subscription's refusal to its callback as an error; a message would come as a message.
    lim.subscribe('payments.>', { callback: (e, m) => got.push(e ? `error ${(e as { code?: string }).code}` : m.subject) });
    const mine: string[] = [];
    lim.subscribe('orders.mine', { callback: (_e, m) => mine.push(sc.decode(m.data)) });
    await lim.flush().catch(() => undefined);
    watcher.publish('payments.y', sc.encode('x'));
    watcher.publish('orders.mine', sc.encode('marker'));
    await eventually(() => mine.length === 1, 10_000, 'the subscription marker');
    r.limitedDeniedSubGot = got;
    await eventually(() => violations(limSt).length >= 3, 10_000, 'three violations');
    r.limitedViolations = violations(limSt).sort();
    r.limitedOpen = !lim.isClosed();

    // allow_responses: the responder answers each request once; a second answer and any other publish are refused.
    const respSt = statuses(resp);
    let n = 0;
    resp.subscribe('svc.echo', {
      callback: (_e, m) => {
        n++;
        m.respond(sc.encode(`r${n}a`));
        if (n === 1) {
          m.respond(sc.encode(`r${n}b`));
          resp.publish('svc.other', sc.encode('not a reply'));
        }
      },
    });
    await resp.flush();
    const replies: string[] = [];
    watcher.subscribe('rq.inbox.>', { callback: (_e, m) => replies.push(`${m.subject}=${sc.decode(m.data)}`) });
    const other: string[] = [];
    watcher.subscribe('svc.other', { callback: (_e, m) => other.push(sc.decode(m.data)) });
    await watcher.flush();
    watcher.publish('svc.echo', sc.encode('q1'), { reply: 'rq.inbox.1' });
    await eventually(() => replies.length >= 1, 10_000, 'the first reply');
    watcher.publish('svc.echo', sc.encode('q2'), { reply: 'rq.inbox.2' });
    await eventually(() => replies.includes('rq.inbox.2=r2a'), 10_000, 'the second request reply (the marker)');
    r.replies = [...replies];
    r.responderOther = other;
    await eventually(() => violations(respSt).length >= 2, 10_000, 'the responder violations');
    r.responderViolations = violations(respSt).sort();
  } finally {
    await Promise.allSettled([watcher.close(), lim.close(), resp.close()]);
  }
  return r;
}

const EXPECTED_PERMISSIONS = {
  limitedDelivered: ['orders.ok=marker'],
  limitedDeniedSubGot: ['error PERMISSIONS_VIOLATION'],
  limitedViolations: ['publish orders.secret', 'publish payments.x', 'subscription payments.>'],
  limitedOpen: true,
  replies: ['rq.inbox.1=r1a', 'rq.inbox.2=r2a'],
  responderOther: [],
  responderViolations: ['publish rq.inbox.1', 'publish svc.other'],
};

describe('NATS NKey and JWT logins with the nats client', () => {
  let k: Keys;
  let dir: string;
  let broker: FlowmqProcess;
  const servers: ChildProcess[] = [];
  let opPort = 0;
  let nkPort = 0;

  before(async () => {
    k = await makeKeys();
    dir = mkdtempSync(join(tmpdir(), 'nats-jwt-'));
    writeFileSync(join(dir, 'operator.jwt'), k.operatorJwt);
    writeFileSync(join(dir, 'operator-v1.jwt'), k.v1.operatorJwt);
    mkdirSync(join(dir, 'accounts'));
    writeFileSync(join(dir, 'accounts', `${k.v1.account.getPublicKey()}.jwt`), k.v1.accountJwt);
    writeFileSync(join(dir, 'accounts', `${k.brief.account.getPublicKey()}.jwt`), k.brief.accountJwt);
    // The stranger account (another operator's) is not preloaded: its users are users of an unknown account.
    writeFileSync(join(dir, 'accounts', `${k.acme.getPublicKey()}.jwt`), k.accountJwts[k.acme.getPublicKey()]!);
    broker = await FlowmqProcess.start({
      args: [
        '--allow-anonymous',
        'false',
        '--nats-operator',
        `${join(dir, 'operator.jwt')},${join(dir, 'operator-v1.jwt')}`,
        '--nats-accounts',
        join(dir, 'accounts'),
      ],
    });
    await broker.api('POST', '/api/v1/users', { username: 'admin', password: 'admin-pw', groups: ['admins'] });
    broker.credentials = { username: 'admin', password: 'admin-pw' };
    for (const n of ['full', 'limited', 'responder']) await broker.api('POST', '/api/v1/users', { username: `nk-${n}`, nkey: k.users[n]!.getPublicKey() });
    const policy = async (name: string, effect: string, actions: string[], resources: string[], user: string) =>
      broker.api('POST', '/api/v1/policies', { name, effect, actions, resources, principals: [`user:${user}`] });
    await policy('nk-full', 'allow', ['publish', 'subscribe'], ['topic:#'], 'nk-full');
    await policy('nk-limited-pub', 'allow', ['publish'], ['topic:orders/#'], 'nk-limited');
    await policy('nk-limited-secret', 'deny', ['publish'], ['topic:orders/secret'], 'nk-limited');
    await policy('nk-limited-sub', 'allow', ['subscribe'], ['topic:orders/#', 'topic:_INBOX/#'], 'nk-limited');
    await policy('nk-responder', 'allow', ['subscribe', 'respond'], ['topic:svc/#'], 'nk-responder');

    // nats-server in operator mode with the same operator and accounts, and one with the same nkey users.
    [opPort, nkPort] = [await freePort(), await freePort()];
    const preload = Object.entries({ ...k.accountJwts, [k.v1.account.getPublicKey()]: k.v1.accountJwt, [k.brief.account.getPublicKey()]: k.brief.accountJwt })
      .filter(([pub]) => pub !== k.stranger.getPublicKey())
      .map(([pub, jwt]) => `  ${pub}: "${jwt}"`)
      .join('\n');
    writeFileSync(
      join(dir, 'op.conf'),
      `listen: "127.0.0.1:${opPort}"\noperator: "${join(dir, 'operator-v1.jwt')}"\nresolver: MEMORY\nresolver_preload: {\n${preload}\n}\n`,
    );
    const pk = (n: string) => k.users[n]!.getPublicKey();
    writeFileSync(
      join(dir, 'nk.conf'),
      `listen: "127.0.0.1:${nkPort}"\nauthorization { users = [\n` +
        `  { nkey: ${pk('full')} }\n` +
        `  { nkey: ${pk('limited')}, permissions: { publish: { allow: ["orders.>"], deny: ["orders.secret"] }, subscribe: { allow: ["orders.>", "_INBOX.>"] } } }\n` +
        `  { nkey: ${pk('responder')}, permissions: { subscribe: { allow: ["svc.>"] }, allow_responses: true } }\n` +
        `]}\n`,
    );
    for (const c of ['op.conf', 'nk.conf']) servers.push(spawn('nats-server', ['-c', join(dir, c)], { stdio: 'ignore' }));
    for (const p of [opPort, nkPort]) {
      await eventually(
        async () => {
          try {
            const raw = await RawNats.connect(p);
            raw.destroy();
            return true;
          } catch {
            return false;
          }
        },
        10_000,
        'nats-server up',
      );
    }
  });

  // Clients of the `brief` account, connected at once: its JWT expires while they are connected.
  const briefClosed: Array<Promise<unknown>> = [];
  before(async () => {
    for (const port of [opPort, broker.natsPort]) {
      const nc = await connect({ servers: `127.0.0.1:${port}`, reconnect: false, authenticator: jwtAuthenticator(k.brief.userJwt) });
      briefClosed.push(nc.closed());
    }
  });

  after(async () => {
    for (const s of servers) s.kill('SIGTERM');
    await broker?.stop();
    broker?.cleanup();
  });

  it('INFO carries a nonce per connection, as nats-server sends it for nkey users and operator mode', async () => {
    const nonces: string[] = [];
    for (const port of [broker.natsPort, broker.natsPort, opPort, nkPort]) {
      const raw = await RawNats.connect(port);
      const info = await raw.info();
      raw.destroy();
      assert.equal(typeof info.nonce, 'string');
      assert.equal(info.auth_required, true);
      nonces.push(info.nonce as string);
    }
    assert.notEqual(nonces[0], nonces[1]);
  });

  it('NKey users: the same outcomes as nats-server with nkeyAuthenticator, and the same permissions', async () => {
    const run = async (port: number) => {
      const nk = (n: string) => ({ authenticator: nkeyAuthenticator(k.users[n]!.getSeed()) });
      const r: Record<string, unknown> = {
        full: await outcome(port, nk('full')),
        unknown: await outcome(port, nk('other')),
        none: await outcome(port, {}),
      };
      return Object.assign(r, await permissions(port, nk('full'), nk('limited'), nk('responder')));
    };
    const expected = { full: 'ok', unknown: 'AUTHORIZATION_VIOLATION', none: 'AUTHORIZATION_VIOLATION', ...EXPECTED_PERMISSIONS };
    assert.deepEqual(await run(nkPort), expected, 'nats-server');
    assert.deepEqual(await run(broker.natsPort), expected, 'FlowMQ');
  });

  it("a signature that is not the NKey's: -ERR 'Authorization Violation' and close, on both", async () => {
    for (const port of [nkPort, broker.natsPort]) {
      const raw = await RawNats.connect(port);
      const info = await raw.info();
      const sig = Buffer.from(k.users.other!.sign(Buffer.from(info.nonce as string))).toString('base64url');
      raw.send(`CONNECT {"verbose":false,"nkey":"${k.users.full!.getPublicKey()}","sig":"${sig}"}\r\nPING\r\n`);
      assert.equal(await raw.line(), "-ERR 'Authorization Violation'", `port ${port}`);
      await raw.ended();
    }
  });

  it('JWT logins: the same outcomes as nats-server in operator mode with a MEMORY resolver', async () => {
    const expected = {
      full: 'ok',
      jwtAuthenticator: 'ok',
      scoped: 'ok',
      expired: 'AUTHORIZATION_VIOLATION',
      revoked: 'AUTHORIZATION_VIOLATION',
      outsider: 'AUTHORIZATION_VIOLATION',
      wrongSeed: 'AUTHORIZATION_VIOLATION',
      noCredentials: 'AUTHORIZATION_VIOLATION',
      password: 'AUTHORIZATION_VIOLATION',
      ...EXPECTED_PERMISSIONS,
      limitedJsApi: ['publish $JS.API.STREAM.CREATE.X'],
    };
    assert.deepEqual(await jwtScenario(opPort, k), expected, 'nats-server');
    assert.deepEqual(await jwtScenario(broker.natsPort, k), expected, 'FlowMQ');
  });

  it("a user JWT expiring while connected: -ERR 'User Authentication Expired' and close, on both", async () => {
    const u = createUser();
    const jwt = await encodeUser('soon', u, k.acme, {}, { exp: Math.floor(Date.now() / 1000) + 3 });
    const lines = await Promise.all(
      [opPort, broker.natsPort].map(async (port) => {
        const raw = await RawNats.connect(port);
        const info = await raw.info();
        const sig = Buffer.from(u.sign(Buffer.from(info.nonce as string))).toString('base64url');
        raw.send(`CONNECT {"verbose":false,"jwt":"${jwt}","sig":"${sig}"}\r\nPING\r\n`);
        // nats-server PINGs a new client early (its first RTT measure): PINGs are not what is looked at here.
        const got: string[] = [];
        while (got.length < 2) {
          const l = await raw.line();
          if (l !== 'PING') got.push(l);
        }
        await raw.ended();
        return got;
      }),
    );
    assert.deepEqual(lines, [
      ['PONG', "-ERR 'User Authentication Expired'"],
      ['PONG', "-ERR 'User Authentication Expired'"],
    ]);
  });

  it("an account JWT expiring while its clients are connected: 'Account Authentication Expired' and close, on both", async () => {
    const ends = await Promise.all(briefClosed);
    assert.deepEqual(
      ends.map((e) => (e as Error | undefined)?.message),
      ["'Account Authentication Expired'", "'Account Authentication Expired'"],
    );
    // A new client of the expired account is refused.
    for (const port of [opPort, broker.natsPort]) {
      assert.equal(await outcome(port, { authenticator: jwtAuthenticator(k.brief.userJwt) }), 'AUTHORIZATION_VIOLATION', `port ${port}`);
    }
  });

  it('JWTs in the v1 format (type at the top of the claims): accepted as nats-server 2.9 accepts them', async () => {
    for (const port of [opPort, broker.natsPort]) {
      const seed = k.v1.user.getSeed();
      const r = {
        creds: await outcome(port, { authenticator: credsAuthenticator(fmtCreds(k.v1.userJwt, k.v1.user)) }),
        jwt: await outcome(port, { authenticator: jwtAuthenticator(k.v1.userJwt, seed) }),
        wrongAccount: await outcome(port, { authenticator: jwtAuthenticator(k.v1.strangerUserJwt, seed) }),
      };
      assert.deepEqual(r, { creds: 'ok', jwt: 'ok', wrongAccount: 'AUTHORIZATION_VIOLATION' }, `port ${port}`);
    }
  });

  it("a JWT user is in its account's namespace; the nkey user is the directory user", async () => {
    const nc = await connect({
      servers: broker.natsServer,
      reconnect: false,
      name: 'jwt-client',
      authenticator: credsAuthenticator(fmtCreds(k.jwts.full!, k.users.full!)),
    });
    const nk = await connect({
      servers: broker.natsServer,
      reconnect: false,
      name: 'nkey-client',
      authenticator: nkeyAuthenticator(k.users.limited!.getSeed()),
    });
    try {
      const clients = (await broker.api('GET', '/api/v1/clients?protocol=nats')) as { items: Array<{ clientId: string; user: string; namespace: string }> };
      const jwtClient = clients.items.find((c) => c.clientId === 'jwt-client');
      const nkClient = clients.items.find((c) => c.clientId === 'nkey-client');
      assert.equal(jwtClient?.namespace, 'acme');
      assert.equal(jwtClient?.user, k.users.full!.getPublicKey());
      assert.equal(nkClient?.user, 'nk-limited');
    } finally {
      await Promise.allSettled([nc.close(), nk.close()]);
    }
  });

  it('a JWT user without subject limits uses JetStream (a stream made, a publish acknowledged)', async () => {
    const nc = await connect({ servers: broker.natsServer, reconnect: false, authenticator: credsAuthenticator(fmtCreds(k.jwts.full!, k.users.full!)) });
    try {
      const jsm = await nc.jetstreamManager();
      await jsm.streams.add({ name: 'JWTORDERS', subjects: ['orders.>'] });
      const ack = await nc.jetstream().publish('orders.js', sc.encode('stored'));
      assert.equal(ack.stream, 'JWTORDERS');
      const info = await jsm.streams.info('JWTORDERS');
      assert.equal(info.state.messages, 1);
    } finally {
      await nc.close();
    }
  });

  it('the CLI sets and removes a user nkey; a removed key logs in no more', async () => {
    const seed = createUser();
    const env = { FLOWMQ_USER: 'admin', FLOWMQ_PASSWORD: 'admin-pw' };
    const add = await broker.cli(['user', 'add', 'nk-cli', '--nkey', seed.getPublicKey()], env);
    assert.equal(add.code, 0, add.stderr);
    await broker.api('POST', '/api/v1/policies', {
      name: 'nk-cli',
      effect: 'allow',
      actions: ['publish'],
      resources: ['topic:cli/#'],
      principals: ['user:nk-cli'],
    });
    assert.equal(await outcome(broker.natsPort, { authenticator: nkeyAuthenticator(seed.getSeed()) }), 'ok');
    const del = await broker.cli(['user', 'set-nkey', 'nk-cli'], env);
    assert.equal(del.code, 0, del.stderr);
    assert.equal(await outcome(broker.natsPort, { authenticator: nkeyAuthenticator(seed.getSeed()) }), 'AUTHORIZATION_VIOLATION');
    const user = (await broker.api('GET', '/api/v1/users/nk-cli')) as { nkey: string | null; mechanisms: string[] };
    assert.equal(user.nkey, null);
  });
});
