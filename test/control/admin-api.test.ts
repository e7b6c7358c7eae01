/**
 * The admin API's doors, over real HTTP: Basic authentication, API tokens and dashboard sessions (cookie + CSRF)
 * against the directory, the loopback bootstrap while no user exists, the JSON content type on state-changing
 * requests, the Host header check (DNS rebinding), the login rate limit, security headers, the error envelope, and
 * the OpenAPI document checked against the registered routes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { Engine } from '../../src/core/index.js';
import { hostName, parseBasicAuth, parseBearer, type AdminApi } from '../../src/control/admin-api.js';
import { startBroker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { JSON_TYPE, basic, call, controlPlane, engineWith, logCapture, startApi, type Plane } from './admin-api-helpers.js';

describe('admin API logins share the password guard', () => {
  it('slows repeated wrong passwords from one address and answers 503 with Retry-After once it is booked up', async () => {
    const engine = await engineWith('keep');
    const plane = await controlPlane([{ username: 'alice', password: 'wonder:land' }], {
      guard: { throttle: { freeFailures: 1, baseDelayMs: 20, maxDelayMs: 80 } },
    });
    const api = await startApi({ engine, access: plane.access });
    try {
      // Two failures in a row put the address over its free failure; a burst after that is spaced, then refused.
      for (let i = 0; i < 2; i++) assert.equal((await call(api, 'GET', '/api/v1/streams', { auth: ['alice', 'guess'] })).status, 401);
      const replies = await Promise.all(Array.from({ length: 10 }, () => call(api, 'GET', '/api/v1/streams', { auth: ['alice', 'guess'] })));
      const statuses = replies.map((r) => r.status);
      assert.ok(statuses.includes(401), statuses.join());
      const busy = replies.find((r) => r.status === 503);
      assert.ok(busy, `some attempts are refused without a check: ${statuses.join()}`);
      assert.equal(busy.body.error?.code, 'BUSY');
      assert.equal(busy.headers['retry-after'], '1');
      assert.ok(plane.guard.stats.bad < 12, `fewer than 12 scrypt checks ran (${plane.guard.stats.bad})`);
      assert.ok(engine.getStream('keep'));
    } finally {
      await api.close();
      await plane.close();
    }
  });
});

describe('admin API with users: HTTP Basic authentication', () => {
  let engine: Engine;
  let plane: Plane;
  let api: AdminApi;
  let lines: Array<Record<string, unknown>>;
  before(async () => {
    engine = await engineWith('keep', 'doomed');
    plane = await controlPlane([
      { username: 'alice', password: 'wonder:land' },
      { username: 'bob', password: 'builder' },
    ]);
    const cap = logCapture();
    lines = cap.lines;
    api = await startApi({ engine, access: plane.access, logger: cap.logger });
  });
  after(async () => {
    await api.close();
    await plane.close();
  });

  it('refuses an anonymous DELETE with 401 and a Basic challenge, and the stream stays', async () => {
    const r = await call(api, 'DELETE', '/api/v1/streams/keep', { headers: JSON_TYPE });
    assert.equal(r.status, 401);
    assert.equal(r.headers['www-authenticate'], 'Basic realm="flowmq"');
    assert.equal(r.body.error?.code, 'UNAUTHENTICATED');
    assert.ok(engine.getStream('keep'), 'the stream must still exist');
  });

  it("sends no Basic challenge to a page script's fetch (Sec-Fetch-Dest: empty), so the browser opens no dialog over the dashboard", async () => {
    const script = await call(api, 'GET', '/api/v1/streams', {
      headers: { 'sec-fetch-mode': 'same-origin', 'sec-fetch-dest': 'empty', 'sec-fetch-site': 'same-origin' },
    });
    assert.equal(script.status, 401);
    assert.equal(script.headers['www-authenticate'], undefined);
    const navigation = await call(api, 'GET', '/api/v1/streams', { headers: { 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' } });
    assert.equal(navigation.headers['www-authenticate'], 'Basic realm="flowmq"');
    // Node's fetch sends Sec-Fetch-Mode: cors but no Sec-Fetch-Dest: a program, which can answer the challenge.
    const program = await call(api, 'GET', '/api/v1/streams', { headers: { 'sec-fetch-mode': 'cors' } });
    assert.equal(program.headers['www-authenticate'], 'Basic realm="flowmq"');
  });

  it('refuses every /api/v1 call without credentials, reads included (but the OpenAPI document)', async () => {
    for (const path of [
      '/api/v1/streams',
      '/api/v1/broker',
      '/api/v1/streams/keep',
      '/api/v1/users',
      '/api/v1/session',
      '/api/v1/clients',
      '/api/v1/nothing-here',
    ]) {
      const r = await call(api, 'GET', path);
      assert.equal(r.status, 401, path);
      assert.equal(r.body.error?.code, 'UNAUTHENTICATED');
    }
    assert.equal((await call(api, 'GET', '/api/v1/openapi.json')).status, 200);
  });

  it('refuses a wrong password, an unknown user and malformed headers with 401, and logs the refused logins', async () => {
    const wrong = await call(api, 'DELETE', '/api/v1/streams/keep', { headers: JSON_TYPE, auth: ['alice', 'wonder'] });
    assert.equal(wrong.status, 401);
    assert.equal(wrong.headers['www-authenticate'], 'Basic realm="flowmq"');
    assert.equal(wrong.body.error?.message, 'invalid username or password');
    const unknown = await call(api, 'GET', '/api/v1/streams', { auth: ['mallory', 'wonder:land'] });
    assert.equal(unknown.status, 401);
    const bearer = await call(api, 'GET', '/api/v1/streams', { headers: { authorization: 'Bearer abc' } });
    assert.equal(bearer.status, 401);
    const other = await call(api, 'GET', '/api/v1/streams', { headers: { authorization: 'Digest x' } });
    assert.equal(other.status, 401);
    assert.ok(engine.getStream('keep'));
    const refused = lines.filter((l) => l.msg === 'admin API login refused: invalid username or password');
    assert.deepEqual(refused.map((l) => l.username).slice(0, 2), ['alice', 'mallory']);
    assert.ok(refused.every((l) => l.remote === '127.0.0.1'));
    assert.ok(!JSON.stringify(lines).includes('wonder'), 'no password in the log');
  });

  it('accepts a user of the directory (a password holding ":" included); lists are {items, next}', async () => {
    const list = await call(api, 'GET', '/api/v1/streams', { auth: ['alice', 'wonder:land'] });
    assert.equal(list.status, 200);
    assert.deepEqual((list.body.items as Array<{ name: string }>).map((s) => s.name).sort(), ['doomed', 'keep']);
    assert.equal(list.body.next, null);
    const del = await call(api, 'DELETE', '/api/v1/streams/doomed', { headers: JSON_TYPE, auth: ['bob', 'builder'] });
    assert.equal(del.status, 204);
    assert.equal(engine.getStream('doomed'), undefined);
  });

  it('leaves /healthz and /readyz open', async () => {
    const r = await call(api, 'GET', '/healthz');
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: 'ok' });
    assert.equal((await call(api, 'GET', '/readyz')).status, 200);
  });

  it('says who may use it', () => {
    assert.match(api.auth, /^users \(2 in the directory\), API tokens, dashboard sessions$/);
    assert.equal(api.exposed, false);
  });
});

describe('admin API: API tokens (Bearer)', () => {
  let plane: Plane;
  let api: AdminApi;
  before(async () => {
    plane = await controlPlane([
      { username: 'alice', password: 'pw-alice', groups: ['admins'] },
      { username: 'bob', password: 'pw-bob' },
    ]);
    api = await startApi({ engine: await engineWith('keep'), access: plane.access });
  });
  after(async () => {
    await api.close();
    await plane.close();
  });

  it('creates a token whose secret is shown once, lets it in, lists it without the secret, and refuses it once revoked', async () => {
    const made = await call(api, 'POST', '/api/v1/tokens', { auth: ['bob', 'pw-bob'], body: { description: 'ci' } });
    assert.equal(made.status, 201, made.text);
    const token = String(made.body.token);
    assert.match(token, /^fmq_[0-9a-f]+\.[A-Za-z0-9_-]+$/);
    assert.equal(made.body.user, 'bob');
    const bearer = { authorization: `Bearer ${token}` };
    const list = await call(api, 'GET', '/api/v1/streams', { headers: bearer });
    assert.equal(list.status, 200);
    const session = await call(api, 'GET', '/api/v1/session', { headers: bearer });
    assert.equal(session.body.user, 'bob');
    assert.equal(session.body.via, 'token');
    const tokens = await call(api, 'GET', '/api/v1/tokens', { headers: bearer });
    assert.deepEqual(
      (tokens.body.items as Array<{ id: string; description: string }>).map((t) => [t.id, t.description]),
      [[made.body.id, 'ci']],
    );
    assert.ok(!tokens.text.includes(token.split('.')[1]), 'the secret is never listed');
    const tampered = await call(api, 'GET', '/api/v1/streams', { headers: { authorization: `Bearer ${token.slice(0, -2)}xx` } });
    assert.equal(tampered.status, 401);
    assert.equal((await call(api, 'DELETE', `/api/v1/tokens/${String(made.body.id)}`, { headers: { ...bearer, ...JSON_TYPE } })).status, 204);
    const revoked = await call(api, 'GET', '/api/v1/streams', { headers: bearer });
    assert.equal(revoked.status, 401);
    assert.equal(revoked.body.error?.message, 'invalid or expired API token');
  });

  it("needs admin to create or see another user's tokens", async () => {
    // Once a policy exists (default auto), bob is no administrator; alice is (group admins).
    await plane.directory.putPolicy({ name: 'bob-streams', effect: 'allow', actions: ['describe'], resources: ['stream:*'], principals: ['user:bob'] });
    const forAlice = await call(api, 'POST', '/api/v1/tokens', { auth: ['bob', 'pw-bob'], body: { user: 'alice' } });
    assert.equal(forAlice.status, 403);
    assert.equal(forAlice.body.error?.code, 'FORBIDDEN');
    const own = await call(api, 'POST', '/api/v1/tokens', { auth: ['bob', 'pw-bob'], body: {} });
    assert.equal(own.status, 201, 'own tokens need no policy');
    const seeAlice = await call(api, 'GET', '/api/v1/tokens?user=alice', { auth: ['bob', 'pw-bob'] });
    assert.equal(seeAlice.status, 403);
    const forBob = await call(api, 'POST', '/api/v1/tokens', { auth: ['alice', 'pw-alice'], body: { user: 'bob', ttl: '1h' } });
    assert.equal(forBob.status, 201);
    assert.ok(Date.parse(String(forBob.body.expiresAt)) > Date.now());
    const all = await call(api, 'GET', '/api/v1/tokens?user=bob', { auth: ['alice', 'pw-alice'] });
    assert.ok((all.body.items as Array<{ id: string }>).some((t) => t.id === forBob.body.id));
    await plane.directory.deletePolicy('bob-streams');
  });

  it('refuses an expired token', async () => {
    const t = await plane.directory.createToken({ user: 'bob', ttlMs: 1 });
    await new Promise((r) => setTimeout(r, 5));
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { authorization: `Bearer ${t.token}` } })).status, 401);
  });
});

describe('admin API: dashboard sessions (cookie + CSRF token)', () => {
  let plane: Plane;
  let api: AdminApi;
  let engine: Engine;
  before(async () => {
    plane = await controlPlane([{ username: 'carol', password: 'pw-carol' }]);
    engine = await engineWith('keep');
    api = await startApi({ engine, access: plane.access });
  });
  after(async () => {
    await api.close();
    await plane.close();
  });

  const login = async (a: AdminApi = api) => {
    const r = await call(a, 'POST', '/api/v1/login', { body: { username: 'carol', password: 'pw-carol' } });
    assert.equal(r.status, 200, r.text);
    const setCookie = String((r.headers['set-cookie'] as string[])[0]);
    return { r, setCookie, cookie: setCookie.split(';')[0], csrf: String(r.body.csrfToken) };
  };

  it('logs in: an HttpOnly, SameSite=Strict cookie and the CSRF token; no password or cookie kept in clear in the store', async () => {
    const { r, setCookie, cookie } = await login();
    assert.equal(r.body.user, 'carol');
    assert.ok(Date.parse(String(r.body.expiresAt)) > Date.now() + 11 * 3_600_000, '12 h by default');
    assert.match(setCookie, /^flowmq_session=[A-Za-z0-9_-]{40,};/);
    assert.match(setCookie, /HttpOnly/);
    assert.match(setCookie, /SameSite=Strict/);
    assert.match(setCookie, /Path=\//);
    const stored = await plane.store.listControl('session');
    assert.ok(stored.length >= 1);
    assert.ok(!JSON.stringify(stored).includes(cookie.split('=')[1]), 'the store holds a hash of the cookie, not the cookie');
  });

  it('refuses a wrong password with 401 and no Basic challenge (no browser dialog)', async () => {
    const r = await call(api, 'POST', '/api/v1/login', { body: { username: 'carol', password: 'nope' } });
    assert.equal(r.status, 401);
    assert.equal(r.headers['www-authenticate'], undefined);
    assert.equal(r.headers['set-cookie'], undefined);
  });

  it('reads with the cookie alone; a change needs the X-CSRF-Token header of that session', async () => {
    const { cookie, csrf } = await login();
    const session = await call(api, 'GET', '/api/v1/session', { headers: { cookie } });
    assert.equal(session.status, 200);
    assert.equal(session.body.csrfToken, csrf);
    assert.equal(session.body.via, 'session');
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { cookie } })).status, 200);
    const noCsrf = await call(api, 'POST', '/api/v1/streams', { headers: { cookie }, body: { name: 'evil' } });
    assert.equal(noCsrf.status, 403);
    assert.equal(noCsrf.body.error?.code, 'CSRF_TOKEN_MISMATCH');
    const wrongCsrf = await call(api, 'POST', '/api/v1/streams', {
      headers: { cookie, 'x-csrf-token': csrf.slice(0, -1) + (csrf.endsWith('A') ? 'B' : 'A') },
      body: { name: 'evil' },
    });
    assert.equal(wrongCsrf.status, 403);
    assert.equal(engine.getStream('evil'), undefined);
    const ok = await call(api, 'POST', '/api/v1/streams', { headers: { cookie, 'x-csrf-token': csrf }, body: { name: 'good' } });
    assert.equal(ok.status, 201);
  });

  it('ends at logout, and a made-up cookie is refused', async () => {
    const { cookie, csrf } = await login();
    const out = await call(api, 'POST', '/api/v1/logout', { headers: { cookie, 'x-csrf-token': csrf, ...JSON_TYPE } });
    assert.equal(out.status, 204);
    assert.match(String((out.headers['set-cookie'] as string[])[0]), /^flowmq_session=;/);
    assert.equal((await call(api, 'GET', '/api/v1/session', { headers: { cookie } })).status, 401);
    assert.equal((await call(api, 'GET', '/api/v1/session', { headers: { cookie: 'flowmq_session=' + 'a'.repeat(43) } })).status, 401);
  });

  it('works on another API sharing the control store (another broker), and ends when its user is deleted', async () => {
    const { cookie } = await login();
    const other = await controlPlane([], { store: plane.store });
    const api2 = await startApi({ engine, access: other.access });
    try {
      assert.equal((await call(api2, 'GET', '/api/v1/session', { headers: { cookie } })).body.user, 'carol');
      await plane.directory.deleteUser('carol');
      await other.directory.refresh();
      assert.equal((await call(api2, 'GET', '/api/v1/session', { headers: { cookie } })).status, 401);
    } finally {
      await api2.close();
      await other.close();
      await plane.directory.addUser({ username: 'carol', password: 'pw-carol' });
    }
  });

  it('expires after --http-session-ttl', async () => {
    const short = await startApi({ engine, access: plane.access, sessionTtlMs: 30 });
    try {
      const { cookie } = await login(short);
      await new Promise((r) => setTimeout(r, 60));
      const r = await call(short, 'GET', '/api/v1/session', { headers: { cookie } });
      assert.equal(r.status, 401);
      assert.match(String(r.body.error?.message), /expired/);
    } finally {
      await short.close();
    }
  });

  it('rate-limits logins per address: the 11th in a minute gets 429 in the error envelope, even with the right password', async () => {
    const limited = await startApi({ engine, access: plane.access });
    try {
      for (let i = 0; i < 10; i++) {
        assert.notEqual(
          (await call(limited, 'POST', '/api/v1/login', { body: { username: 'carol', password: i % 2 ? 'pw-carol' : 'bad' } })).status,
          429,
          `attempt ${i + 1}`,
        );
      }
      const r = await call(limited, 'POST', '/api/v1/login', { body: { username: 'carol', password: 'pw-carol' } });
      assert.equal(r.status, 429);
      assert.equal(r.body.error?.code, 'RATE_LIMITED');
      assert.ok(Number(r.headers['retry-after']) > 0);
      // Other routes are not limited.
      assert.equal((await call(limited, 'GET', '/api/v1/streams', { auth: ['carol', 'pw-carol'] })).status, 200);
    } finally {
      await limited.close();
    }
  });
});

describe('admin API: bootstrap while no user exists', () => {
  let plane: Plane;
  let api: AdminApi;
  before(async () => {
    plane = await controlPlane();
    api = await startApi({ engine: await engineWith(), access: plane.access });
  });
  after(async () => {
    await api.close();
    await plane.close();
  });

  it('lets loopback callers in as an administrator and refuses other addresses', async () => {
    assert.match(api.auth, /^bootstrap/);
    const me = await call(api, 'GET', '/api/v1/session');
    assert.equal(me.status, 200);
    assert.equal(me.body.via, 'bootstrap');
    assert.equal(me.body.admin, true);
    const remote = await api.app.inject({ method: 'GET', url: '/api/v1/streams', remoteAddress: '192.0.2.7', headers: { host: '127.0.0.1' } });
    assert.equal(remote.statusCode, 401);
    assert.match(JSON.parse(remote.body).error.message, /no user exists yet/);
  });

  it('creates the first user; from then on credentials are required, from loopback too', async () => {
    const made = await call(api, 'POST', '/api/v1/users', { body: { username: 'root', password: 'first-pw', groups: ['admins'] } });
    assert.equal(made.status, 201, made.text);
    assert.deepEqual(made.body.groups, ['admins']);
    assert.equal(made.body.password, undefined);
    assert.equal((await call(api, 'GET', '/api/v1/streams')).status, 401);
    assert.equal((await call(api, 'GET', '/api/v1/users', { auth: ['root', 'first-pw'] })).status, 200);
  });
});

describe('admin API: state-changing requests must be JSON', () => {
  let engine: Engine;
  let plane: Plane;
  let api: AdminApi;
  before(async () => {
    engine = await engineWith('keep');
    plane = await controlPlane();
    api = await startApi({ engine, access: plane.access });
  });
  after(async () => {
    await api.close();
    await plane.close();
  });

  it('refuses a create sent as a form or as text with 415', async () => {
    const form = await call(api, 'POST', '/api/v1/streams', {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'name=evil&partitions=1',
    });
    assert.equal(form.status, 415);
    assert.equal(form.body.error?.code, 'UNSUPPORTED_MEDIA_TYPE');
    const text = await call(api, 'POST', '/api/v1/streams', { headers: { 'content-type': 'text/plain' }, body: '{"name":"evil"}' });
    assert.equal(text.status, 415);
    const none = await call(api, 'POST', '/api/v1/streams', { body: '{"name":"evil"}' });
    assert.equal(none.status, 415);
    assert.equal(engine.getStream('evil'), undefined);
  });

  it('refuses DELETE and the flush POST without the JSON content type, even without a body', async () => {
    const del = await call(api, 'DELETE', '/api/v1/streams/keep');
    assert.equal(del.status, 415);
    assert.equal(del.body.error?.code, 'UNSUPPORTED_MEDIA_TYPE');
    assert.equal((await call(api, 'DELETE', '/api/v1/streams/keep', { headers: { 'content-type': 'text/plain' } })).status, 415);
    assert.equal((await call(api, 'POST', '/api/v1/streams/keep/flush')).status, 415);
    assert.ok(engine.getStream('keep'));
  });

  it('accepts application/json (with parameters, any case, empty body included) and leaves GET alone', async () => {
    const create = await call(api, 'POST', '/api/v1/streams', {
      headers: { 'content-type': 'Application/JSON; charset=utf-8' },
      body: '{"name":"made","partitions":2}',
    });
    assert.equal(create.status, 201, create.text);
    assert.equal(engine.getStream('made')?.def.partitions, 2);
    assert.equal((await call(api, 'GET', '/api/v1/streams/made')).status, 200);
    assert.equal((await call(api, 'POST', '/api/v1/streams/made/flush', { headers: JSON_TYPE })).status, 200);
    assert.equal((await call(api, 'DELETE', '/api/v1/streams/made', { headers: JSON_TYPE })).status, 204);
  });

  it('answers bad JSON, unknown fields, wrong types and a malformed %-escape with 400 INVALID_ARGUMENT', async () => {
    const bad = await call(api, 'POST', '/api/v1/streams', { headers: JSON_TYPE, body: '{"name":' });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error?.code, 'INVALID_ARGUMENT');
    const unknown = await call(api, 'POST', '/api/v1/streams', { body: { name: 'x', partitons: 2 } });
    assert.equal(unknown.status, 400);
    assert.equal(unknown.body.error?.code, 'INVALID_ARGUMENT');
    const type = await call(api, 'POST', '/api/v1/streams', { body: { name: 'x', partitions: 'many' } });
    assert.equal(type.status, 400);
    assert.match(String(type.body.error?.message), /partitions/);
    assert.equal(engine.getStream('x'), undefined);
    const esc = await call(api, 'GET', '/api/v1/streams/%E0%A4%A');
    assert.equal(esc.status, 400);
    assert.equal(esc.body.error?.code, 'INVALID_ARGUMENT');
    const missing = await call(api, 'GET', '/api/v1/streams/nope');
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error?.code, 'NOT_FOUND');
    const route = await call(api, 'GET', '/api/v1/no-such-thing');
    assert.equal(route.status, 404);
    assert.equal(route.body.error?.code, 'NOT_FOUND');
  });
});

describe('admin API: Host header check (DNS rebinding)', () => {
  let engine: Engine;
  let plane: Plane;
  let api: AdminApi;
  let lines: Array<Record<string, unknown>>;
  before(async () => {
    engine = await engineWith('keep');
    plane = await controlPlane();
    const cap = logCapture();
    lines = cap.lines;
    api = await startApi({ engine, access: plane.access, logger: cap.logger, allowedHosts: ['flowmq.internal', 'Admin.Example.COM:9000'] });
  });
  after(async () => {
    await api.close();
    await plane.close();
  });

  it('refuses a foreign host name with 421 and leaves the stream', async () => {
    for (const host of ['evil.example', `evil.example:${api.address().port}`, '127.0.0.1.evil.example', 'localhost.evil.example']) {
      const r = await call(api, 'DELETE', '/api/v1/streams/keep', { headers: { host, ...JSON_TYPE } });
      assert.equal(r.status, 421, host);
      assert.equal(r.body.error?.code, 'MISDIRECTED_REQUEST');
      assert.match(r.body.error!.message, /--http-allowed-hosts/);
    }
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: 'evil.example' } })).status, 421);
    assert.equal((await call(api, 'POST', '/api/v1/login', { headers: { host: 'evil.example' }, body: { username: 'a', password: 'b' } })).status, 421);
    assert.ok(engine.getStream('keep'));
    assert.ok(lines.some((l) => l.msg === 'admin API request for a host name it does not serve refused' && l.host === 'evil.example'));
  });

  it('refuses a request without a Host header (HTTP/1.0)', async () => {
    const port = api.address().port;
    const text = await new Promise<string>((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => s.end('DELETE /api/v1/streams/keep HTTP/1.0\r\nContent-Type: application/json\r\n\r\n'));
      let out = '';
      s.on('data', (d: Buffer) => (out += d.toString()));
      s.on('end', () => resolve(out));
      s.on('error', reject);
    });
    assert.match(text, /^HTTP\/1\.[01] 421 /);
    assert.match(text, /a Host header is required/);
    assert.ok(engine.getStream('keep'));
  });

  it('accepts the bind address and the loopback names, with or without the port', async () => {
    const port = api.address().port;
    for (const host of ['127.0.0.1', `127.0.0.1:${port}`, 'localhost', `LOCALHOST:${port}`, 'localhost.', '[::1]', `[::1]:${port}`, '[0:0:0:0:0:0:0:1]']) {
      assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host } })).status, 200, host);
    }
  });

  it('accepts --http-allowed-hosts entries, whatever the port, and only those', async () => {
    for (const host of ['flowmq.internal', 'flowmq.internal:8080', 'admin.example.com', 'admin.example.com:1234']) {
      assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host } })).status, 200, host);
    }
    for (const host of ['other.internal', 'x.flowmq.internal', 'example.com', 'flowmq.internal@evil.example', 'flowmq.internal/x']) {
      assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host } })).status, 421, host);
    }
  });

  it('leaves /healthz, /readyz and /metrics to load balancers and scrapers whatever name they use', async () => {
    assert.equal((await call(api, 'GET', '/healthz', { headers: { host: 'lb.example' } })).status, 200);
    assert.equal((await call(api, 'GET', '/readyz', { headers: { host: 'lb.example' } })).status, 200);
    assert.equal((await call(api, 'GET', '/metrics', { headers: { host: 'lb.example' } })).status, 404, 'no metrics source: 404, not 421');
  });
});

describe('admin API bound to a wildcard address', () => {
  let plane: Plane;
  let api: AdminApi;
  before(async () => {
    plane = await controlPlane();
    api = await startApi({ engine: await engineWith(), access: plane.access, host: '0.0.0.0' });
  });
  after(async () => {
    await api.close();
    await plane.close();
  });

  it("accepts the machine's interface addresses and localhost, refuses other names", async () => {
    const port = api.address().port;
    const v4 = Object.values(networkInterfaces())
      .flatMap((l) => l ?? [])
      .filter((i) => i.family === 'IPv4')
      .map((i) => i.address);
    assert.ok(v4.includes('127.0.0.1'));
    for (const a of v4) assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: `${a}:${port}` } })).status, 200, a);
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: 'localhost' } })).status, 200);
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: 'evil.example' } })).status, 421);
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: '203.0.113.9' } })).status, 421);
  });

  it('is not exposed: without users only loopback callers get in', () => {
    assert.equal(api.exposed, false);
  });
});

describe('admin API: health, readiness, metrics, security headers, log level', () => {
  it('/readyz follows ready(); /metrics serves the source; --http-metrics-allow restricts the open paths by address', async () => {
    const plane = await controlPlane();
    let ready = false;
    const api = await startApi({
      engine: await engineWith(),
      access: plane.access,
      ready: () => ready,
      metrics: { contentType: 'text/plain; version=0.0.4; charset=utf-8', metrics: async () => 'flowmq_up 1\n' },
      metricsAllow: ['127.0.0.0/8', '10.1.0.0/16'],
    });
    try {
      const notReady = await call(api, 'GET', '/readyz');
      assert.equal(notReady.status, 503);
      ready = true;
      assert.equal((await call(api, 'GET', '/readyz')).status, 200);
      const m = await call(api, 'GET', '/metrics');
      assert.equal(m.status, 200);
      assert.equal(m.text, 'flowmq_up 1\n');
      assert.match(String(m.headers['content-type']), /^text\/plain; version=0\.0\.4/);
      for (const url of ['/metrics', '/healthz', '/readyz']) {
        const far = await api.app.inject({ method: 'GET', url, remoteAddress: '192.0.2.1' });
        assert.equal(far.statusCode, 403, url);
        assert.equal(JSON.parse(far.body).error.code, 'FORBIDDEN');
        assert.equal((await api.app.inject({ method: 'GET', url, remoteAddress: '10.1.200.3' })).statusCode, 200, url);
      }
    } finally {
      await api.close();
      await plane.close();
    }
  });

  it('serves a prom-client registry as /metrics', async () => {
    const { Registry, Counter } = await import('prom-client');
    const registry = new Registry();
    new Counter({ name: 'flowmq_test_total', help: 'a test counter', registers: [registry] }).inc(3);
    const plane = await controlPlane();
    const api = await startApi({ engine: await engineWith(), access: plane.access, metrics: registry });
    try {
      const m = await call(api, 'GET', '/metrics');
      assert.equal(m.status, 200);
      assert.match(m.text, /^flowmq_test_total 3$/m);
      assert.equal(m.headers['content-type'], registry.contentType);
    } finally {
      await api.close();
      await plane.close();
    }
  });

  it('sends security headers: a CSP allowing only its own scripts, nosniff, no framing', async () => {
    const plane = await controlPlane();
    const api = await startApi({ engine: await engineWith(), access: plane.access });
    try {
      const r = await call(api, 'GET', '/healthz');
      const csp = String(r.headers['content-security-policy']);
      assert.match(csp, /script-src 'self'(;|$)/);
      assert.match(csp, /default-src 'self'/);
      // Plain HTTP from a LAN address: the page's own scripts must not be upgraded to https:// (a blank dashboard).
      assert.doesNotMatch(csp, /upgrade-insecure-requests/);
      assert.match(csp, /frame-ancestors 'none'|frame-ancestors 'self'/);
      assert.equal(r.headers['x-content-type-options'], 'nosniff');
      assert.ok(r.headers['x-frame-options']);
    } finally {
      await api.close();
      await plane.close();
    }
  });

  it('changes the root logger level at run time (children follow); only administrators may', async () => {
    const plane = await controlPlane([
      { username: 'op', password: 'pw', groups: ['admins'] },
      { username: 'dev', password: 'pw' },
    ]);
    await plane.directory.putPolicy({ name: 'dev-read', effect: 'allow', actions: ['describe'], resources: ['cluster:*'], principals: ['user:dev'] });
    const root = pino({ level: 'info' }, { write: () => undefined });
    const child = root.child({ component: 'kafka' });
    const api = await startApi({ engine: await engineWith(), access: plane.access, rootLogger: root, logger: root.child({ component: 'admin' }) });
    try {
      assert.deepEqual((await call(api, 'GET', '/api/v1/log-level', { auth: ['dev', 'pw'] })).body, { level: 'info' });
      const refused = await call(api, 'PUT', '/api/v1/log-level', { auth: ['dev', 'pw'], body: { level: 'debug' } });
      assert.equal(refused.status, 403);
      assert.equal(root.level, 'info');
      const bad = await call(api, 'PUT', '/api/v1/log-level', { auth: ['op', 'pw'], body: { level: 'loud' } });
      assert.equal(bad.status, 400);
      const ok = await call(api, 'PUT', '/api/v1/log-level', { auth: ['op', 'pw'], body: { level: 'debug' } });
      assert.equal(ok.status, 200);
      assert.equal(root.level, 'debug');
      assert.equal(child.isLevelEnabled('debug'), true);
    } finally {
      await api.close();
      await plane.close();
    }
  });
});

describe('admin API: the OpenAPI document matches the routes', () => {
  it('documents every registered route and nothing else', async () => {
    const plane = await controlPlane();
    const routes: string[] = [];
    const api = await startApi({
      engine: await engineWith(),
      access: plane.access,
      // A hidden extra route (the dashboard's static files are hidden the same way) must stay out of the check.
      dashboard: (app) => {
        app.get('/dashboard-probe', { schema: { hide: true } }, async () => 'x');
      },
    });
    try {
      const doc = (await call(api, 'GET', '/api/v1/openapi.json')).body as unknown as { openapi: string; paths: Record<string, Record<string, unknown>> };
      assert.match(doc.openapi, /^3\./);
      const documented = new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`)));
      // Every route fastify registered (HEAD routes are GET's automatic twins).
      for (const r of registeredRoutes(api)) routes.push(r);
      const registered = new Set(routes);
      assert.ok(registered.size > 50, `routes found: ${registered.size}`);
      for (const r of registered) assert.ok(documented.has(r), `route ${r} is not in the OpenAPI document`);
      for (const d of documented) assert.ok(registered.has(d), `documented ${d} is not a route`);
      for (const must of [
        'POST /api/v1/login',
        'GET /api/v1/cluster',
        'GET /api/v1/streams/{name}/messages',
        'DELETE /api/v1/mqtt/retained/{topic}',
        'PUT /api/v1/policies/{name}',
        'GET /metrics',
      ]) {
        assert.ok(documented.has(must), must);
      }
    } finally {
      await api.close();
      await plane.close();
    }
  });
});

/** `METHOD /path/{param}` of every non-hidden route the API registered (collected by its onRoute hook). */
function registeredRoutes(api: AdminApi): string[] {
  return api.routes.filter((r) => !r.hidden && r.method !== 'HEAD').map((r) => `${r.method} ${r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}')}`);
}

describe('admin API helpers', () => {
  it('parses Basic credentials (RFC 7617: split at the first colon) and Bearer tokens', () => {
    const b = (s: string) => `Basic ${Buffer.from(s).toString('base64')}`;
    assert.deepEqual(parseBasicAuth(b('alice:wonder:land')), { username: 'alice', password: 'wonder:land' });
    assert.deepEqual(parseBasicAuth(`basic  ${Buffer.from('bob:').toString('base64')}`), { username: 'bob', password: '' });
    assert.equal(parseBasicAuth(b(':pw')), null);
    assert.equal(parseBasicAuth(b('nocolon')), null);
    assert.equal(parseBasicAuth('Bearer x'), null);
    assert.equal(parseBasicAuth(undefined), null);
    assert.equal(parseBearer('Bearer fmq_ab12.xyz-_'), 'fmq_ab12.xyz-_');
    assert.equal(parseBearer('bearer  t0k'), 't0k');
    assert.equal(parseBearer(basic('a', 'b').authorization), null);
    assert.equal(parseBearer('Bearer a b'), null);
  });

  it('reduces a Host header or an entry to its canonical host name', () => {
    assert.equal(hostName('LocalHost:8080'), 'localhost');
    assert.equal(hostName('example.com.'), 'example.com');
    assert.equal(hostName('[::1]:80'), '::1');
    assert.equal(hostName('[0:0::1]'), '::1');
    assert.equal(hostName('::1'), '::1');
    assert.equal(hostName('127.1'), '127.0.0.1');
    assert.equal(hostName('a@b'), null);
    assert.equal(hostName('a/b'), null);
    assert.equal(hostName(''), null);
    assert.equal(hostName('a..b'), null);
  });
});

describe('broker: the admin API binds --http-host, not --host', () => {
  const dirs: string[] = [];
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const flags = (extra: Record<string, string>) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-admin-'));
    dirs.push(dataDir);
    return { 'data-dir': dataDir, protocols: 'mqtt', 'mqtt-ws': 'false', 'mqtt-port': '0', 'http-port': '0', ...extra };
  };

  it('binds 127.0.0.1 by default while the protocol listeners bind --host, and says loopback bootstraps the first user', async () => {
    const { logger, lines } = logCapture();
    const broker = await startBroker(loadConfig({ flags: flags({ host: '0.0.0.0' }), env: {} }), logger);
    try {
      assert.equal(broker.admin.address().address, '127.0.0.1');
      assert.equal(broker.listeners.get('mqtt')!.address().address, '0.0.0.0');
      const line = lines.find((l) => l.msg === 'listening (admin API)');
      assert.equal(line?.address, `127.0.0.1:${broker.admin.address().port}`);
      assert.match(String(line?.auth), /^bootstrap: loopback callers/);
      assert.ok(!lines.some((l) => l.level === 40 && l.protocol === 'http'), 'no warning on loopback');
      const ready = await fetch(`http://127.0.0.1:${broker.admin.address().port}/readyz`);
      assert.equal(ready.status, 200);
      const info = (await (await fetch(`http://127.0.0.1:${broker.admin.address().port}/api/v1/broker`)).json()) as Record<string, unknown>;
      assert.match(String(info.version), /^\d+\.\d+\.\d+/);
      assert.equal(info.ready, true);
    } finally {
      await broker.close();
    }
  });

  it('warns on a non-loopback address without users, and names the users when there are some', async () => {
    const open = logCapture();
    let broker = await startBroker(loadConfig({ flags: flags({ host: '127.0.0.1', 'http-host': '0.0.0.0' }), env: {} }), open.logger);
    try {
      assert.equal(broker.admin.address().address, '0.0.0.0');
      const warn = open.lines.find((l) => l.level === 40 && l.protocol === 'http');
      assert.match(String(warn?.msg), /answers loopback callers only/);
      assert.equal(broker.admin.exposed, false);
    } finally {
      await broker.close();
    }
    const usersDir = mkdtempSync(join(tmpdir(), 'flowmq-admin-users-'));
    dirs.push(usersDir);
    writeFileSync(join(usersDir, 'users.yaml'), '- username: alice\n  password: pw1\n- username: bob\n  password: pw2\n');
    const closed = logCapture();
    broker = await startBroker(
      loadConfig({ flags: flags({ host: '127.0.0.1', 'http-host': '0.0.0.0', 'users-file': join(usersDir, 'users.yaml') }), env: {} }),
      closed.logger,
    );
    try {
      assert.match(String(closed.lines.find((l) => l.msg === 'listening (admin API)')?.auth), /^users \(2 in the directory\)/);
      assert.ok(!closed.lines.some((l) => l.level === 40 && l.protocol === 'http'));
    } finally {
      await broker.close();
    }
  });
});
