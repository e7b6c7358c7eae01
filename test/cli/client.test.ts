import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiClient, ApiError, newPassword, resolveAuth } from '../../src/cli/client.js';
import { UsageError } from '../../src/cli/command.js';

describe('CLI credentials', () => {
  it('takes a token over a user from the environment, and a --user over FLOWMQ_TOKEN', async () => {
    assert.deepEqual(await resolveAuth({}, { FLOWMQ_TOKEN: 'fmq_a.b', FLOWMQ_USER: 'alice', FLOWMQ_PASSWORD: 'pw' }), { kind: 'token', token: 'fmq_a.b' });
    assert.deepEqual(await resolveAuth({ user: 'bob' }, { FLOWMQ_TOKEN: 'fmq_a.b', FLOWMQ_PASSWORD: 'pw' }), { kind: 'basic', name: 'bob', password: 'pw' });
    assert.deepEqual(await resolveAuth({ token: 'fmq_c.d' }, {}), { kind: 'token', token: 'fmq_c.d' });
    assert.equal(await resolveAuth({}, {}), null);
    await assert.rejects(resolveAuth({ user: 'a:b' }, { FLOWMQ_PASSWORD: 'x' }), UsageError);
  });
  it('reads a new password from FLOWMQ_NEW_PASSWORD, refuses an empty one', async () => {
    assert.equal(await newPassword('alice', { FLOWMQ_NEW_PASSWORD: 'n3w' }), 'n3w');
    await assert.rejects(newPassword('alice', { FLOWMQ_NEW_PASSWORD: '' }), UsageError);
  });
});

describe('ApiClient', () => {
  let server: Server;
  let base: string;
  const seen: Array<{ method: string; url: string; auth: string | undefined; type: string | undefined; body: string }> = [];
  before(async () => {
    server = createServer((req: IncomingMessage, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        seen.push({ method: req.method!, url: req.url!, auth: req.headers.authorization, type: req.headers['content-type'], body });
        const u = new URL(req.url!, 'http://x');
        res.setHeader('content-type', 'application/json');
        if (u.pathname === '/api/v1/things') {
          // Three pages of two, the cursor being the next index.
          const from = Number(u.searchParams.get('cursor') ?? 0);
          const limit = Number(u.searchParams.get('limit'));
          const all = ['a', 'b', 'c', 'd', 'e'];
          const items = all.slice(from, from + Math.min(2, limit)).map((name) => ({ name }));
          const next = from + items.length < all.length ? String(from + items.length) : null;
          return res.end(JSON.stringify({ items, next }));
        }
        if (u.pathname === '/api/v1/old') return res.end(JSON.stringify({ streams: [{ name: 'x' }] }));
        if (u.pathname === '/api/v1/denied') {
          res.statusCode = 403;
          return res.end(JSON.stringify({ error: { code: 'FORBIDDEN', message: 'user "bob" may not create stream "x"' } }));
        }
        res.statusCode = 401;
        res.end(JSON.stringify({ error: { code: 'UNAUTHENTICATED', message: 'no' } }));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  it('follows list cursors to the end, or stops at a limit', async () => {
    const c = new ApiClient(base, { kind: 'token', token: 'fmq_x.y' });
    assert.deepEqual(
      (await c.list<{ name: string }>('/api/v1/things')).map((t) => t.name),
      ['a', 'b', 'c', 'd', 'e'],
    );
    assert.deepEqual(
      (await c.list<{ name: string }>('/api/v1/things', {}, 3)).map((t) => t.name),
      ['a', 'b', 'c'],
    );
    assert.equal(seen.at(-1)!.auth, 'Bearer fmq_x.y');
    // The older answer shape of a list is one page.
    assert.deepEqual(await c.list('/api/v1/old'), [{ name: 'x' }]);
  });

  it("sends JSON with Basic credentials, and turns the error envelope into the API's message and code", async () => {
    const c = new ApiClient(base, { kind: 'basic', name: 'bob', password: 'pw:1' });
    const err = await c.request('POST', '/api/v1/denied', { name: 'x' }).catch((e: unknown) => e);
    assert.ok(err instanceof ApiError);
    assert.equal(err.message, 'user "bob" may not create stream "x" (FORBIDDEN)');
    assert.equal(err.status, 403);
    const req = seen.at(-1)!;
    assert.equal(req.auth, `Basic ${Buffer.from('bob:pw:1').toString('base64')}`);
    assert.equal(req.type, 'application/json');
    assert.equal(req.body, '{"name":"x"}');
    // A state-changing request without a body still sends an empty JSON object (fastify refuses an empty JSON body).
    await c.request('DELETE', '/api/v1/denied').catch(() => undefined);
    assert.equal(seen.at(-1)!.body, '{}');
    const unauth = await new ApiClient(base, { kind: 'token', token: 't' }).request('GET', '/api/v1/else').catch((e: unknown) => e);
    assert.match((unauth as Error).message, /refused the API token/);
  });
});
