/**
 * The admin API behind users, end to end against the real bin/flowmq started with a users file: HTTP Basic, an API
 * token, a dashboard session with its CSRF token; anonymous callers and wrong passwords refused; the login rate
 * limit. (The `flowmq` CLI's own handling of credentials is tested with the CLI.)
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlowmqProcess } from './harness.js';

const basic = (u: string, p: string) => ({ authorization: `Basic ${Buffer.from(`${u}:${p}`).toString('base64')}` });
const JSON_TYPE = { 'content-type': 'application/json' };

describe('e2e: admin API with a users file', () => {
  let broker: FlowmqProcess;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-admin-e2e-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: "wonder:land"\n- username: bob\n  password: builder\n');
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml')] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('logs who may use the admin API', async () => {
    const line = await broker.waitForLog((l) => l.msg === 'listening (admin API)');
    assert.match(String(line.auth), /^users \(2 in the directory\)/);
    assert.match(String(line.address), /^127\.0\.0\.1:\d+$/);
  });

  it('creates, lists and deletes streams with HTTP Basic; refuses anonymous callers and wrong passwords', async () => {
    const made = await fetch(`${broker.http}/api/v1/streams`, {
      method: 'POST',
      headers: { ...JSON_TYPE, ...basic('alice', 'wonder:land') },
      body: JSON.stringify({ name: 'precious', partitions: 2 }),
    });
    assert.equal(made.status, 201);
    const anon = await fetch(`${broker.http}/api/v1/streams/precious`, { method: 'DELETE', headers: JSON_TYPE });
    assert.equal(anon.status, 401);
    assert.equal(anon.headers.get('www-authenticate'), 'Basic realm="flowmq"');
    const wrong = await fetch(`${broker.http}/api/v1/streams/precious`, { method: 'DELETE', headers: { ...JSON_TYPE, ...basic('alice', 'wonder') } });
    assert.equal(wrong.status, 401);
    assert.deepEqual(await wrong.json(), { error: { code: 'UNAUTHENTICATED', message: 'invalid username or password' } });
    assert.equal((await fetch(`${broker.http}/healthz`)).status, 200);
    assert.equal((await fetch(`${broker.http}/readyz`)).status, 200);
    const list = (await (await fetch(`${broker.http}/api/v1/streams`, { headers: basic('bob', 'builder') })).json()) as {
      items: Array<{ name: string; partitions: number }>;
      next: null;
    };
    assert.deepEqual(list, { items: [list.items[0]], next: null });
    assert.equal(list.items[0].name, 'precious');
    assert.equal(list.items[0].partitions, 2);
    await broker.waitForLog((l) => l.msg === 'admin API login refused: invalid username or password' && l.username === 'alice');
  });

  it('issues an API token that works as a Bearer credential until revoked', async () => {
    const made = (await (
      await fetch(`${broker.http}/api/v1/tokens`, {
        method: 'POST',
        headers: { ...JSON_TYPE, ...basic('bob', 'builder') },
        body: JSON.stringify({ description: 'e2e' }),
      })
    ).json()) as {
      id: string;
      token: string;
    };
    const bearer = { authorization: `Bearer ${made.token}` };
    const me = (await (await fetch(`${broker.http}/api/v1/session`, { headers: bearer })).json()) as { user: string; via: string };
    assert.deepEqual([me.user, me.via], ['bob', 'token']);
    assert.equal((await fetch(`${broker.http}/api/v1/tokens/${made.id}`, { method: 'DELETE', headers: { ...JSON_TYPE, ...bearer } })).status, 204);
    assert.equal((await fetch(`${broker.http}/api/v1/session`, { headers: bearer })).status, 401);
  });

  it('logs in a dashboard session: reads with the cookie, changes need the CSRF token; the 11th login in a minute is refused', async () => {
    const login = await fetch(`${broker.http}/api/v1/login`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: JSON.stringify({ username: 'alice', password: 'wonder:land' }),
    });
    assert.equal(login.status, 200);
    const { csrfToken } = (await login.json()) as { csrfToken: string };
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    assert.equal((await fetch(`${broker.http}/api/v1/streams/precious`, { headers: { cookie } })).status, 200);
    const forged = await fetch(`${broker.http}/api/v1/streams/precious`, { method: 'DELETE', headers: { cookie, ...JSON_TYPE } });
    assert.equal(forged.status, 403);
    const del = await fetch(`${broker.http}/api/v1/streams/precious`, { method: 'DELETE', headers: { cookie, 'x-csrf-token': csrfToken, ...JSON_TYPE } });
    assert.equal(del.status, 204);
    // One login above; nine more pass, the eleventh is rate-limited.
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await fetch(`${broker.http}/api/v1/login`, {
        method: 'POST',
        headers: JSON_TYPE,
        body: JSON.stringify({ username: 'alice', password: 'nope' }),
      });
      statuses.push(r.status);
    }
    assert.deepEqual(statuses.slice(-1), [429]);
    assert.ok(
      statuses.slice(0, 9).every((s) => s === 401 || s === 503),
      statuses.join(),
    );
  });

  it('keeps sessions and API tokens across a restart (they live in the metastore), users created through the API too', async () => {
    const admin = { ...JSON_TYPE, ...basic('alice', 'wonder:land') };
    assert.equal(
      (await fetch(`${broker.http}/api/v1/users`, { method: 'POST', headers: admin, body: JSON.stringify({ username: 'carol', password: 'carol-pw' }) }))
        .status,
      201,
    );
    const made = (await (
      await fetch(`${broker.http}/api/v1/tokens`, { method: 'POST', headers: { ...JSON_TYPE, ...basic('carol', 'carol-pw') }, body: '{}' })
    ).json()) as { token: string };
    // The login rate limit's window (the test above used it up) is in memory: the restart clears it.
    broker = await broker.restart();
    const login = await fetch(`${broker.http}/api/v1/login`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: JSON.stringify({ username: 'carol', password: 'carol-pw' }),
    });
    assert.equal(login.status, 200);
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    broker = await broker.restart();
    const viaCookie = (await (await fetch(`${broker.http}/api/v1/session`, { headers: { cookie } })).json()) as { user: string; via: string };
    assert.deepEqual([viaCookie.user, viaCookie.via], ['carol', 'session']);
    const viaToken = (await (await fetch(`${broker.http}/api/v1/session`, { headers: { authorization: `Bearer ${made.token}` } })).json()) as { user: string };
    assert.equal(viaToken.user, 'carol');
  });
});
