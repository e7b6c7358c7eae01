/**
 * WebhookAuthenticator (src/control/webhook.ts) against a real node:http server: the request it sends, each kind
 * of answer, the timeout, the cache of yes answers (TTL, size, keyed by username and password), shared in-flight
 * requests, passwords kept out of logs; and the broker wiring it for users the directory does not know.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { WebhookAuthenticator } from '../../src/control/index.js';
import { startBroker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

interface Seen {
  method: string;
  contentType: string | undefined;
  body: Record<string, unknown>;
}

/** The test's identity system: answers per username. */
const seen: Seen[] = [];
const held: ServerResponse[] = [];
let server: Server;
let url = '';

function answer(_req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>): void {
  const json = (status: number, b: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(typeof b === 'string' ? b : JSON.stringify(b));
  };
  switch (body.username) {
    case 'alice':
      return body.password === 'right' ? json(200, { result: 'allow', groups: ['ops', 'devs'], namespace: 'team-a' }) : json(200, { result: 'deny' });
    case 'plain':
      return json(200, { result: 'allow' });
    case 'unauthorized':
      return json(401, { error: 'no' });
    case 'forbidden':
      return json(403, {});
    case 'broken':
      return json(500, { error: 'db down' });
    case 'notjson':
      return json(200, '<html>');
    case 'badgroups':
      return json(200, { result: 'allow', groups: 'ops' });
    case 'redirect':
      res.writeHead(302, { location: 'http://127.0.0.1:1/steal' });
      return void res.end();
    case 'slow':
      held.push(res); // answered when the test ends: the client gives up first
      return;
    default:
      return json(200, { result: 'nope' });
  }
}

before(async () => {
  server = createServer((req, res) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      const body = JSON.parse(data) as Record<string, unknown>;
      seen.push({ method: req.method!, contentType: req.headers['content-type'], body });
      answer(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  url = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}/auth`;
});

after(async () => {
  for (const r of held) r.end();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const ctx = { protocol: 'mqtt', remoteAddress: '10.0.0.7' };

describe('WebhookAuthenticator', () => {
  it('posts username, password, protocol and address as JSON and maps each answer', async () => {
    const w = new WebhookAuthenticator({ url, timeoutMs: 5000, cacheTtlMs: 0 });
    seen.length = 0;
    assert.deepEqual(await w.check('alice', Buffer.from('right'), ctx), { verdict: 'ok', groups: ['ops', 'devs'], namespace: 'team-a' });
    assert.deepEqual(seen[0], {
      method: 'POST',
      contentType: 'application/json',
      body: { username: 'alice', password: 'right', protocol: 'mqtt', remoteAddress: '10.0.0.7' },
    });
    assert.deepEqual(await w.check('alice', 'wrong', ctx), { verdict: 'bad' }, '200 with another result');
    assert.deepEqual(await w.check('plain', 'x', ctx), { verdict: 'ok' });
    assert.deepEqual(await w.check('unauthorized', 'x', ctx), { verdict: 'bad' });
    assert.deepEqual(await w.check('forbidden', 'x', ctx), { verdict: 'bad' });
    assert.deepEqual(await w.check('broken', 'x', ctx), { verdict: 'busy' }, 'a server error is never a no (nor a yes)');
    assert.deepEqual(await w.check('notjson', 'x', ctx), { verdict: 'busy' });
    assert.deepEqual(await w.check('badgroups', 'x', ctx), { verdict: 'busy' });
    assert.deepEqual(await w.check('redirect', 'x', ctx), { verdict: 'busy' }, 'a redirect is not followed (the password would go elsewhere)');
    assert.deepEqual(await w.check('whoever', 'x', ctx), { verdict: 'bad' });
    assert.deepEqual(w.stats, { requests: 10, allowed: 2, denied: 4, failed: 4, cacheHits: 0 });
    w.close();
  });

  it('answers busy when the webhook is too slow or unreachable', async () => {
    const slow = new WebhookAuthenticator({ url, timeoutMs: 200, cacheTtlMs: 60_000 });
    assert.deepEqual(await slow.check('slow', 'x', ctx), { verdict: 'busy' });
    const down = new WebhookAuthenticator({ url: 'http://127.0.0.1:1/auth', timeoutMs: 2000, cacheTtlMs: 60_000 });
    assert.deepEqual(await down.check('alice', 'right', ctx), { verdict: 'busy' });
    assert.equal(down.cached, 0);
  });

  it('caches yes answers per username and password until the TTL, bounded; never a no', async () => {
    let now = 1_000_000;
    const w = new WebhookAuthenticator({ url, timeoutMs: 5000, cacheTtlMs: 60_000, cacheSize: 2, now: () => now });
    seen.length = 0;
    assert.equal((await w.check('alice', 'right', ctx)).verdict, 'ok');
    assert.equal((await w.check('alice', 'right', { protocol: 'kafka' })).verdict, 'ok');
    assert.equal(seen.length, 1, 'the second yes came from the cache');
    assert.equal((await w.check('alice', 'wrong', ctx)).verdict, 'bad', 'another password is asked, not served from the cache');
    assert.equal((await w.check('alice', 'wrong', ctx)).verdict, 'bad');
    assert.equal(seen.length, 3, 'no answers are not cached');
    now += 60_000;
    assert.equal((await w.check('alice', 'right', ctx)).verdict, 'ok');
    assert.equal(seen.length, 4, 'expired: asked again');
    await w.check('plain', 'a', ctx);
    await w.check('plain', 'b', ctx); // the cache holds 2: alice's entry (the oldest) goes
    assert.equal(w.cached, 2);
    await w.check('alice', 'right', ctx);
    assert.equal(seen.length, 7);
    assert.equal(w.stats.cacheHits, 1);
    w.close();
  });

  it('shares one request among concurrent checks of the same credentials', async () => {
    const w = new WebhookAuthenticator({ url, timeoutMs: 5000, cacheTtlMs: 0 });
    seen.length = 0;
    const answers = await Promise.all(Array.from({ length: 5 }, () => w.check('alice', 'right', ctx)));
    assert.ok(answers.every((a) => a.verdict === 'ok'));
    assert.equal(seen.length, 1);
    w.close();
  });

  it('logs failures without the password', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(s) });
    const w = new WebhookAuthenticator({ url, timeoutMs: 5000, cacheTtlMs: 0, logger });
    await w.check('broken', 'hunter2-secret', ctx);
    assert.ok(lines.length >= 1, 'the failure is logged');
    assert.match(lines[0], /answered HTTP 500/);
    assert.ok(lines.every((l) => !l.includes('hunter2-secret')));
    w.close();
  });

  it('refuses a URL that is not http(s)', () => {
    assert.throws(() => new WebhookAuthenticator({ url: 'ftp://x/auth', timeoutMs: 1, cacheTtlMs: 0 }), /auth-webhook: expected an http/);
  });
});

describe('the broker with --auth-webhook', () => {
  it('lets in users the webhook accepts, with its groups; directory users are not sent to it; anonymous is off', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-webhook-'));
    const b = await startBroker(
      loadConfig({
        flags: { host: '127.0.0.1', protocols: 'mqtt', 'mqtt-port': '0', 'mqtt-ws-port': '0', 'http-port': '0', 'data-dir': dataDir, 'auth-webhook': url },
        env: {},
      }),
      pino({ level: 'silent' }),
    );
    try {
      assert.equal(b.access.anonymousAllowed('mqtt'), false, 'a webhook means clients log in');
      await b.access.directory.addUser({ username: 'local', password: 'pw' });
      seen.length = 0;
      const ok = await b.access.password('alice', 'right', '10.0.0.9', 'mqtt');
      assert.deepEqual(ok, { verdict: 'ok', principal: { user: 'alice', groups: ['ops', 'devs'], namespace: 'team-a' } });
      assert.equal((await b.access.password('alice', 'wrong', '10.0.0.9', 'mqtt')).verdict, 'bad');
      assert.equal((await b.access.password('local', 'pw', '10.0.0.9', 'mqtt')).verdict, 'ok');
      assert.deepEqual(
        seen.map((s) => s.body.username),
        ['alice', 'alice'],
        'the directory user never went to the webhook',
      );
      assert.deepEqual(b.access.externalStats, { requests: 2, allowed: 1, denied: 1, failed: 0, cacheHits: 0 });
    } finally {
      await b.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
