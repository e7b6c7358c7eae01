/**
 * The admin API behind a users file, end to end: the real bin/flowmq and the real `flowmq stream` CLI with
 * `--user` / FLOWMQ_USER and the password in FLOWMQ_PASSWORD; anonymous callers and wrong passwords refused.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlowmqProcess } from './harness.js';

describe('e2e: admin API with a users file', () => {
  let broker: FlowmqProcess;
  let dir: string;
  const alice = { FLOWMQ_PASSWORD: 'wonder:land' };
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
    assert.equal(line.auth, 'basic (2 users from users file)');
    assert.match(String(line.address), /^127\.0\.0\.1:\d+$/);
  });

  it('creates, lists and deletes streams with --user and FLOWMQ_PASSWORD', async () => {
    const created = await broker.cli(['stream', 'create', 'orders', '--partitions', '2', '--user', 'alice'], alice);
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, /created stream orders: 2 partition\(s\)/);
    // FLOWMQ_USER instead of the flag.
    const list = await broker.cli(['stream', 'list'], { FLOWMQ_USER: 'bob', FLOWMQ_PASSWORD: 'builder' });
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^orders\s+2\s/m);
    const described = await broker.cli(['stream', 'describe', 'orders', '--user', 'alice'], alice);
    assert.equal(described.code, 0, described.stderr);
    const deleted = await broker.cli(['stream', 'delete', 'orders', '--user', 'alice'], alice);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.match(deleted.stdout, /deleted stream orders/);
    const after = await broker.cli(['stream', 'list', '--user', 'alice'], alice);
    assert.match(after.stdout, /no streams/);
  });

  it('fails clearly without credentials, with a wrong password, and with --user but no password', async () => {
    broker.credentials = { username: 'alice', password: 'wonder:land' };
    await broker.api('POST', '/api/v1/streams', { name: 'precious', partitions: 1 });

    const anon = await broker.cli(['stream', 'delete', 'precious']);
    assert.equal(anon.code, 1);
    assert.match(anon.stderr, /^flowmq: the broker at http:\/\/127\.0\.0\.1:\d+ requires a user: pass --user NAME .*FLOWMQ_PASSWORD/);

    const wrong = await broker.cli(['stream', 'delete', 'precious', '--user', 'alice'], { FLOWMQ_PASSWORD: 'wonder' });
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /refused user "alice": invalid username or password/);

    // No FLOWMQ_PASSWORD and stdin is not a terminal: a usage error, nothing sent.
    const noPassword = await broker.cli(['stream', 'list', '--user', 'alice'], { FLOWMQ_PASSWORD: undefined });
    assert.equal(noPassword.code, 2);
    assert.match(noPassword.stderr, /--user alice needs a password: set FLOWMQ_PASSWORD/);

    // Anonymous HTTP (what a stranger on the network or a web page would send) is refused too.
    const res = await fetch(`${broker.http}/api/v1/streams/precious`, { method: 'DELETE', headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 401);
    assert.equal(res.headers.get('www-authenticate'), 'Basic realm="flowmq"');
    const health = await fetch(`${broker.http}/healthz`);
    assert.equal(health.status, 200);

    const list = await broker.cli(['stream', 'list', '--user', 'alice'], alice);
    assert.match(list.stdout, /^precious\s/m, 'the stream survived every refused attempt');
    await broker.waitForLog((l) => l.msg === 'admin API login refused: invalid username or password' && l.username === 'alice');
  });
});
