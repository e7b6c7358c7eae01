/**
 * The admin API's doors, over real HTTP: Basic authentication against the users store, the JSON content type on
 * state-changing requests (CSRF), the Host header check (DNS rebinding) and the admin API's own bind address.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import { Engine } from '../../src/core/index.js';
import { hostName, parseBasicAuth, startAdminApi, type AdminApi } from '../../src/control/admin-api.js';
import { MemoryUserStore } from '../../src/control/users.js';
import { PasswordGuard } from '../../src/control/password-guard.js';
import { startBroker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: { error?: { code: string; message: string } } & Record<string, unknown>;
}

/** One HTTP request with exactly the headers given (node's http client lets the Host header be anything). */
function call(
  api: AdminApi,
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: string; auth?: [string, string] } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { host: `127.0.0.1:${api.address().port}`, ...opts.headers };
  if (opts.auth) headers.authorization = `Basic ${Buffer.from(`${opts.auth[0]}:${opts.auth[1]}`).toString('base64')}`;
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: api.address().port, method, path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text ? JSON.parse(text) : {} });
      });
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

const JSON_TYPE = { 'content-type': 'application/json' };

function logCapture(): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { logger, lines };
}

async function engineWith(...streams: string[]): Promise<Engine> {
  const m = new MemoryStreams();
  const engine = new Engine(m, m);
  for (const name of streams) await engine.createStream({ name, partitions: 1 });
  return engine;
}

describe('admin API logins share the password guard', () => {
  it('slows repeated wrong passwords from one address and answers 503 with Retry-After once it is booked up', async () => {
    const engine = await engineWith('keep');
    const users = await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonder:land' }]);
    const guard = new PasswordGuard(users, { throttle: { freeFailures: 1, baseDelayMs: 20, maxDelayMs: 80 } });
    const api = await startAdminApi({ engine, logger: pino({ level: 'silent' }), host: '127.0.0.1', port: 0, guard });
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
      assert.ok(guard.stats.bad < 12, `fewer than 12 scrypt checks ran (${guard.stats.bad})`);
      assert.ok(engine.getStream('keep'));
    } finally {
      await api.close();
      await guard.close();
    }
  });
});

describe('admin API with users: HTTP Basic authentication', () => {
  let engine: Engine;
  let guard: PasswordGuard;
  let api: AdminApi;
  let lines: Array<Record<string, unknown>>;
  before(async () => {
    engine = await engineWith('keep', 'doomed');
    const users = await MemoryUserStore.fromPasswords([
      { username: 'alice', password: 'wonder:land' },
      { username: 'bob', password: 'builder' },
    ]);
    const cap = logCapture();
    lines = cap.lines;
    guard = new PasswordGuard(users);
    api = await startAdminApi({ engine, logger: cap.logger, host: '127.0.0.1', port: 0, guard });
  });
  after(async () => {
    await api.close();
    await guard.close();
  });

  it('refuses an anonymous DELETE with 401 and a Basic challenge, and the stream stays', async () => {
    const r = await call(api, 'DELETE', '/api/v1/streams/keep', { headers: JSON_TYPE });
    assert.equal(r.status, 401);
    assert.equal(r.headers['www-authenticate'], 'Basic realm="flowmq"');
    assert.equal(r.body.error?.code, 'UNAUTHENTICATED');
    assert.ok(engine.getStream('keep'), 'the stream must still exist');
  });

  it('refuses every /api/v1 call without credentials, reads included', async () => {
    for (const path of ['/api/v1/streams', '/api/v1/broker', '/api/v1/streams/keep']) {
      const r = await call(api, 'GET', path);
      assert.equal(r.status, 401, path);
      assert.equal(r.body.error?.code, 'UNAUTHENTICATED');
    }
  });

  it('refuses a wrong password, an unknown user and a malformed header with 401, and logs the refused logins', async () => {
    const wrong = await call(api, 'DELETE', '/api/v1/streams/keep', { headers: JSON_TYPE, auth: ['alice', 'wonder'] });
    assert.equal(wrong.status, 401);
    assert.equal(wrong.headers['www-authenticate'], 'Basic realm="flowmq"');
    assert.equal(wrong.body.error?.message, 'invalid username or password');
    const unknown = await call(api, 'GET', '/api/v1/streams', { auth: ['mallory', 'wonder:land'] });
    assert.equal(unknown.status, 401);
    const bearer = await call(api, 'GET', '/api/v1/streams', { headers: { authorization: 'Bearer abc' } });
    assert.equal(bearer.status, 401);
    assert.ok(engine.getStream('keep'));
    const refused = lines.filter((l) => l.msg === 'admin API login refused: invalid username or password');
    assert.deepEqual(refused.map((l) => l.username), ['alice', 'mallory']);
    assert.ok(refused.every((l) => l.remote === '127.0.0.1'));
    assert.ok(!JSON.stringify(lines).includes('wonder'), 'no password in the log');
  });

  it('accepts a user of the users file (a password holding ":" included)', async () => {
    const list = await call(api, 'GET', '/api/v1/streams', { auth: ['alice', 'wonder:land'] });
    assert.equal(list.status, 200);
    assert.deepEqual((list.body.streams as Array<{ name: string }>).map((s) => s.name).sort(), ['doomed', 'keep']);
    const del = await call(api, 'DELETE', '/api/v1/streams/doomed', { headers: JSON_TYPE, auth: ['bob', 'builder'] });
    assert.equal(del.status, 204);
    assert.equal(engine.getStream('doomed'), undefined);
  });

  it('leaves /healthz open', async () => {
    const r = await call(api, 'GET', '/healthz');
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: 'ok' });
  });

  it('says who may use it', () => {
    assert.equal(api.auth, 'basic (2 users from users file)');
    assert.equal(api.exposed, false);
  });
});

describe('admin API: state-changing requests must be JSON', () => {
  let engine: Engine;
  let api: AdminApi;
  before(async () => {
    engine = await engineWith('keep');
    api = await startAdminApi({ engine, logger: pino({ level: 'silent' }), host: '127.0.0.1', port: 0 });
  });
  after(() => api.close());

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
    const delText = await call(api, 'DELETE', '/api/v1/streams/keep', { headers: { 'content-type': 'text/plain' } });
    assert.equal(delText.status, 415);
    const flush = await call(api, 'POST', '/api/v1/streams/keep/flush');
    assert.equal(flush.status, 415);
    assert.ok(engine.getStream('keep'));
  });

  it('accepts application/json (with parameters, any case) and leaves GET alone', async () => {
    const create = await call(api, 'POST', '/api/v1/streams', {
      headers: { 'content-type': 'Application/JSON; charset=utf-8' },
      body: '{"name":"made","partitions":2}',
    });
    assert.equal(create.status, 201);
    assert.equal(engine.getStream('made')?.def.partitions, 2);
    assert.equal((await call(api, 'GET', '/api/v1/streams/made')).status, 200);
    assert.equal((await call(api, 'DELETE', '/api/v1/streams/made', { headers: JSON_TYPE })).status, 204);
  });

  it('answers a malformed %-escape in the path with 400, not an internal error', async () => {
    const r = await call(api, 'GET', '/api/v1/streams/%E0%A4%A');
    assert.equal(r.status, 400);
    assert.equal(r.body.error?.code, 'INVALID_ARGUMENT');
  });

  it('says that anyone who can connect may use it (on loopback: not exposed)', () => {
    assert.equal(api.auth, 'none: anyone who can connect');
    assert.equal(api.exposed, false);
  });
});

describe('admin API: Host header check (DNS rebinding)', () => {
  let engine: Engine;
  let api: AdminApi;
  let lines: Array<Record<string, unknown>>;
  before(async () => {
    engine = await engineWith('keep');
    const cap = logCapture();
    lines = cap.lines;
    api = await startAdminApi({ engine, logger: cap.logger, host: '127.0.0.1', port: 0, allowedHosts: ['flowmq.internal', 'Admin.Example.COM:9000'] });
  });
  after(() => api.close());

  it('refuses a foreign host name with 421 and leaves the stream', async () => {
    for (const host of ['evil.example', `evil.example:${api.address().port}`, '127.0.0.1.evil.example', 'localhost.evil.example']) {
      const r = await call(api, 'DELETE', '/api/v1/streams/keep', { headers: { host, ...JSON_TYPE } });
      assert.equal(r.status, 421, host);
      assert.equal(r.body.error?.code, 'MISDIRECTED_REQUEST');
      assert.match(r.body.error!.message, /--http-allowed-hosts/);
    }
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: 'evil.example' } })).status, 421);
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
    assert.match(text, /^HTTP\/1\.1 421 /);
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

  it('leaves /healthz open to load balancers whatever name they use', async () => {
    assert.equal((await call(api, 'GET', '/healthz', { headers: { host: 'lb.example' } })).status, 200);
  });
});

describe('admin API bound to a wildcard address', () => {
  let api: AdminApi;
  before(async () => {
    api = await startAdminApi({ engine: await engineWith(), logger: pino({ level: 'silent' }), host: '0.0.0.0', port: 0 });
  });
  after(() => api.close());

  it("accepts the machine's interface addresses and localhost, refuses other names", async () => {
    const port = api.address().port;
    const v4 = Object.values(networkInterfaces()).flatMap((l) => l ?? []).filter((i) => i.family === 'IPv4').map((i) => i.address);
    assert.ok(v4.includes('127.0.0.1'));
    for (const a of v4) assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: `${a}:${port}` } })).status, 200, a);
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: 'localhost' } })).status, 200);
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: 'evil.example' } })).status, 421);
    assert.equal((await call(api, 'GET', '/api/v1/streams', { headers: { host: '203.0.113.9' } })).status, 421);
  });

  it('is exposed without users', () => {
    assert.equal(api.exposed, true);
  });
});

describe('admin API helpers', () => {
  it('parses Basic credentials (RFC 7617: split at the first colon)', () => {
    const b = (s: string) => `Basic ${Buffer.from(s).toString('base64')}`;
    assert.deepEqual(parseBasicAuth(b('alice:wonder:land')), { username: 'alice', password: 'wonder:land' });
    assert.deepEqual(parseBasicAuth(`basic  ${Buffer.from('bob:').toString('base64')}`), { username: 'bob', password: '' });
    assert.equal(parseBasicAuth(b(':pw')), null);
    assert.equal(parseBasicAuth(b('nocolon')), null);
    assert.equal(parseBasicAuth('Bearer x'), null);
    assert.equal(parseBasicAuth(undefined), null);
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

  it('binds 127.0.0.1 by default while the protocol listeners bind --host, and says the API is open to anyone who can connect', async () => {
    const { logger, lines } = logCapture();
    const broker = await startBroker(loadConfig({ flags: flags({ host: '0.0.0.0' }), env: {} }), logger);
    try {
      assert.equal(broker.admin.address().address, '127.0.0.1');
      assert.equal(broker.listeners.get('mqtt')!.address().address, '0.0.0.0');
      const line = lines.find((l) => l.msg === 'listening (admin API)');
      assert.equal(line?.address, `127.0.0.1:${broker.admin.address().port}`);
      assert.equal(line?.auth, 'none: anyone who can connect');
      assert.ok(!lines.some((l) => l.level === 40 && l.protocol === 'http'), 'no warning on loopback');
    } finally {
      await broker.close();
    }
  });

  it('warns when unauthenticated on a non-loopback address, and names the users when there are some', async () => {
    const open = logCapture();
    let broker = await startBroker(loadConfig({ flags: flags({ host: '127.0.0.1', 'http-host': '0.0.0.0' }), env: {} }), open.logger);
    try {
      assert.equal(broker.admin.address().address, '0.0.0.0');
      const warn = open.lines.find((l) => l.level === 40 && l.protocol === 'http');
      assert.match(String(warn?.msg), /unauthenticated and bound to a non-loopback address/);
    } finally {
      await broker.close();
    }
    const usersDir = mkdtempSync(join(tmpdir(), 'flowmq-admin-users-'));
    dirs.push(usersDir);
    writeFileSync(join(usersDir, 'users.yaml'), '- username: alice\n  password: pw1\n- username: bob\n  password: pw2\n');
    const closed = logCapture();
    broker = await startBroker(loadConfig({ flags: flags({ host: '127.0.0.1', 'http-host': '0.0.0.0', 'users-file': join(usersDir, 'users.yaml') }), env: {} }), closed.logger);
    try {
      assert.equal(closed.lines.find((l) => l.msg === 'listening (admin API)')?.auth, 'basic (2 users from users file)');
      assert.ok(!closed.lines.some((l) => l.level === 40 && l.protocol === 'http'));
    } finally {
      await broker.close();
    }
  });
});
