/**
 * The control plane as the broker opens it (src/broker.ts openControlPlane): the directory lives in the SQLite
 * metastore (users added live survive a restart), the users file seeds it and refreshes the passwords of the users
 * it created.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'flowmq-control-plane-'));
  dirs.push(d);
  return d;
}

const silent = pino({ level: 'silent' });
const base = { host: '127.0.0.1', protocols: 'mqtt', 'mqtt-port': '0', 'mqtt-ws-port': '0', 'http-port': '0' };

async function start(dataDir: string, flags: Record<string, string> = {}): Promise<Broker> {
  return startBroker(loadConfig({ flags: { ...base, 'data-dir': dataDir, ...flags }, env: {} }), silent);
}

async function check(b: Broker, user: string, password: string): Promise<string> {
  return (await b.access.password(user, password, '127.0.0.1', 'mqtt')).verdict;
}

describe('control plane in the broker', () => {
  it('keeps users, groups, policies and namespaces in the SQLite metastore across a restart', async () => {
    const dataDir = freshDir();
    let b = await start(dataDir);
    try {
      assert.equal(b.access.anonymousAllowed('mqtt'), true, 'zero setup: no users, anonymous allowed');
      const d = b.access.directory;
      await d.putNamespace({ name: 'team-a', quotas: { maxConnections: 3 } });
      await d.addUser({ username: 'alice', password: 'pw-alice', groups: ['ops'], namespace: 'team-a' });
      await d.putPolicy({ name: 'ops', effect: 'allow', actions: ['*'], resources: ['topic:#'], principals: ['group:ops'] });
    } finally {
      await b.close();
    }
    b = await start(dataDir);
    try {
      const d = b.access.directory;
      assert.deepEqual(d.principal('alice'), { user: 'alice', groups: ['ops'], namespace: 'team-a' });
      assert.deepEqual(d.namespace('team-a')?.quotas, { maxConnections: 3 });
      assert.deepEqual(
        d.policies.defs().map((p) => p.name),
        ['ops'],
      );
      assert.equal(await check(b, 'alice', 'pw-alice'), 'ok');
      assert.equal(b.access.anonymousAllowed('mqtt'), false, 'users exist at start: anonymous off unless configured');
    } finally {
      await b.close();
    }
  });

  it('seeds from the users file, and applies a password changed in the file at the next start', async () => {
    const dataDir = freshDir();
    const usersFile = join(freshDir(), 'users.yaml');
    const write = (adminPw: string, opsPw: string) =>
      writeFileSync(
        usersFile,
        `users:
  - {username: admin, password: ${adminPw}, groups: [admins]}
  - {username: op, password: ${opsPw}, groups: [ops], namespace: plant}
namespaces:
  - {name: plant, quotas: {maxConnections: 10}}
policies:
  - {name: ops-read, effect: allow, actions: [subscribe], resources: ["topic:plant/#"], principals: ["group:ops"]}
`,
      );
    write('first', 'op-first');
    let b = await start(dataDir, { 'users-file': usersFile });
    try {
      assert.equal(await check(b, 'admin', 'first'), 'ok');
      assert.deepEqual(b.access.directory.principal('op'), { user: 'op', groups: ['ops'], namespace: 'plant' });
      assert.deepEqual(
        b.access.directory.policies.defs().map((p) => [p.name, p.source]),
        [['ops-read', 'file']],
      );
      await b.access.directory.setPassword('op', 'set-by-api');
    } finally {
      await b.close();
    }
    write('second', 'op-second');
    b = await start(dataDir, { 'users-file': usersFile });
    try {
      assert.equal(await check(b, 'admin', 'second'), 'ok', 'the file changed the password');
      assert.equal(await check(b, 'admin', 'first'), 'bad');
      assert.equal(await check(b, 'op', 'set-by-api'), 'ok', 'a password set through the API wins over the file');
    } finally {
      await b.close();
    }
  });
});
