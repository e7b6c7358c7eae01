/**
 * AccessControl and Access (src/control/access.ts): passwords through the guard, tokens, the external
 * authenticator for unknown users, anonymous protocols, and per-connection verdicts whose cache is dropped when
 * the directory changes (a policy or the user's groups), so a live change applies to an open connection.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AccessControl, ANONYMOUS, Directory, PasswordGuard, type ExternalAuthenticator } from '../../src/control/index.js';
import { MemoryControlStore } from '../../src/storage/metastore/control-store.js';

const CHEAP = { N: 1024, r: 8, p: 1 };
const closers: Array<() => Promise<void> | void> = [];
after(async () => {
  for (const c of closers) await c();
});

async function setup(external?: ExternalAuthenticator) {
  const store = new MemoryControlStore();
  let guard!: PasswordGuard;
  const directory = await Directory.open({ store, hasher: (p) => guard.verifier.hash(p) });
  guard = new PasswordGuard(directory, { verifier: { scrypt: CHEAP } });
  const ac = new AccessControl({ directory, guard, anonymous: new Set(['mqtt']), external });
  closers.push(
    () => guard.close(),
    () => ac.close(),
  );
  return { store, directory, guard, ac };
}

describe('AccessControl: authentication', () => {
  it('checks passwords through the guard and answers the principal', async () => {
    const { directory, ac, guard } = await setup();
    assert.equal(ac.hasUsers, false);
    await directory.addUser({ username: 'alice', password: 'pw', groups: ['ops'] });
    assert.equal(ac.hasUsers, true);
    assert.deepEqual(await ac.password('alice', 'pw', '10.0.0.1', 'mqtt'), {
      verdict: 'ok',
      principal: { user: 'alice', groups: ['ops'], namespace: 'default' },
    });
    assert.deepEqual(await ac.password('alice', Buffer.from('nope'), '10.0.0.1', 'mqtt'), { verdict: 'bad' });
    assert.deepEqual(await ac.password('ghost', 'pw', '10.0.0.2', 'kafka'), { verdict: 'bad' });
    assert.deepEqual(await ac.password('alice', null, '10.0.0.3', 'nats'), { verdict: 'bad' });
    assert.equal(guard.stats.ok, 1);
    assert.equal(ac.anonymousAllowed('mqtt'), true);
    assert.equal(ac.anonymousAllowed('kafka'), false);
    assert.equal(ac.principal(null), ANONYMOUS);
  });

  it('checks API tokens', async () => {
    const { directory, ac } = await setup();
    await directory.addUser({ username: 'alice', password: 'pw' });
    const { token } = await directory.createToken({ user: 'alice' });
    assert.deepEqual(await ac.token(token, '127.0.0.1', 'http'), { verdict: 'ok', principal: { user: 'alice', groups: [], namespace: 'default' } });
    assert.deepEqual(await ac.token(token + 'x', '127.0.0.1', 'http'), { verdict: 'bad' });
  });

  it('asks the external authenticator about unknown users only, and keeps its groups for the principal', async () => {
    const asked: string[] = [];
    const external: ExternalAuthenticator = {
      async check(username, password) {
        asked.push(username);
        if (username === 'ext' && String(password) === 'good') return { verdict: 'ok', groups: ['ext-group'], namespace: 'default' };
        return username === 'slow' ? { verdict: 'busy' } : { verdict: 'bad' };
      },
    };
    const { directory, ac } = await setup(external);
    assert.equal(ac.hasUsers, true, 'a webhook means someone can log in');
    await directory.addUser({ username: 'local', password: 'pw' });
    assert.equal((await ac.password('local', 'pw', '10.1.1.1', 'mqtt')).verdict, 'ok');
    assert.equal((await ac.password('local', 'wrong', '10.1.1.1', 'mqtt')).verdict, 'bad');
    assert.deepEqual(asked, [], 'a directory user is never sent to the webhook');
    assert.deepEqual(await ac.password('ext', 'good', '10.1.1.2', 'amqp'), {
      verdict: 'ok',
      principal: { user: 'ext', groups: ['ext-group'], namespace: 'default' },
    });
    assert.equal((await ac.password('ext', 'bad', '10.1.1.3', 'amqp')).verdict, 'bad');
    assert.equal((await ac.password('slow', 'x', '10.1.1.4', 'amqp')).verdict, 'busy');
    assert.deepEqual(ac.principal('ext').groups, ['ext-group'], 'the principal of a webhook user (SCRAM has none: by name)');
  });
});

describe('Access: per-connection verdicts', () => {
  it('is open while no policy exists, then follows policies changed live', async () => {
    const { directory, ac } = await setup();
    await directory.addUser({ username: 'alice', password: 'pw' });
    const a = ac.accessFor(ac.principal('alice'), 'mqtt', '10.0.0.1');
    assert.equal(a.open, true);
    assert.equal(a.can('publish', 'topic', 'x/y'), true);
    assert.equal(a.subscription('#'), 'allow');
    await directory.putPolicy({ name: 'only-x', effect: 'allow', actions: ['publish', 'subscribe'], resources: ['topic:x/#'], principals: ['user:alice'] });
    assert.equal(a.open, false);
    assert.equal(a.can('publish', 'topic', 'x/y'), true);
    assert.equal(a.can('publish', 'topic', 'z'), false);
    assert.equal(a.subscription('#'), 'filter');
    assert.equal(a.admits('x/1'), true);
    assert.equal(a.admits('y/1'), false);
    await directory.putPolicy({ name: 'no-x-y', effect: 'deny', actions: ['publish'], resources: ['topic:x/y'], principals: ['everyone'] });
    assert.equal(a.can('publish', 'topic', 'x/y'), false, 'the cached yes was dropped on the change');
    await directory.deletePolicy('no-x-y');
    assert.equal(a.can('publish', 'topic', 'x/y'), true);
    assert.equal(ac.stats.denied, 2);
    assert.equal(ac.stats.allowed, 2, 'decided checks are counted (not those skipped while open)');
  });

  it('re-reads the principal after a change: groups added or removed apply to the open connection', async () => {
    const { directory, ac } = await setup();
    await directory.addUser({ username: 'bob', password: 'pw' });
    await directory.putPolicy({ name: 'ops-streams', effect: 'allow', actions: ['*'], resources: ['stream:*'], principals: ['group:ops'] });
    const a = ac.accessFor(ac.principal('bob'), 'kafka');
    assert.equal(a.can('publish', 'stream', 's'), false);
    await directory.updateUser('bob', { groups: ['ops'] });
    assert.deepEqual(a.principal.groups, ['ops']);
    assert.equal(a.can('publish', 'stream', 's'), true);
    await directory.updateUser('bob', { groups: ['admins'] });
    assert.equal(a.can('admin', 'cluster', '*'), true, 'made an admin');
    await directory.updateUser('bob', { groups: [] });
    assert.equal(a.can('admin', 'cluster', '*'), false, 'and back');
  });

  it('an open connection of a user deleted since loses every right at its next request', async () => {
    const { directory, ac } = await setup();
    await directory.addUser({ username: 'dora', password: 'pw' });
    await directory.putPolicy({ name: 'dora', effect: 'allow', actions: ['*'], resources: ['*:*'], principals: ['user:dora'] });
    await directory.putPolicy({ name: 'all-read', effect: 'allow', actions: ['subscribe'], resources: ['topic:#'], principals: ['everyone'] });
    const a = ac.accessFor(ac.principal('dora'), 'nats');
    assert.equal(a.can('publish', 'topic', 'x'), true);
    await directory.deleteUser('dora');
    assert.equal(a.can('publish', 'topic', 'x'), false, 'user:dora still names her, but she is gone');
    assert.equal(a.subscription('x/#'), 'deny', 'not even what everyone may');
    assert.equal(a.admits('x/1'), false);
    assert.equal(a.principal.removed, true);
  });

  it('anonymous connections are matched by everyone policies only; admits is not counted as a denial', async () => {
    const { directory, ac } = await setup();
    await directory.putPolicy({ name: 'pub', effect: 'allow', actions: ['subscribe'], resources: ['topic:public/#'], principals: ['everyone'] });
    await directory.putPolicy({ name: 'alice', effect: 'allow', actions: ['subscribe'], resources: ['topic:#'], principals: ['user:alice'] });
    const a = ac.accessFor(ANONYMOUS, 'mqtt');
    assert.equal(a.subscription('public/#'), 'allow');
    assert.equal(a.subscription('private/#'), 'deny');
    const before = ac.stats.denied;
    assert.equal(a.admits('private/x'), false);
    assert.equal(ac.stats.denied, before, 'a filtered delivery is not a request');
  });
});

describe('AccessControl: streams and queues do not launder a denied topic', () => {
  /** What feeds streams and queues, as the engine would answer it. */
  class Sources {
    sourcesVersion = 0;
    readonly feeds = new Map<string, string[]>();
    set(kind: 'stream' | 'queue', name: string, filters: string[]): void {
      this.feeds.set(`${kind}:${name}`, filters);
      this.sourcesVersion++;
    }
    topicFiltersFeeding(kind: 'stream' | 'queue', name: string): string[] {
      return this.feeds.get(`${kind}:${name}`) ?? [];
    }
  }

  async function policies() {
    const s = await setup();
    await s.directory.addUser({ username: 'alice', password: 'pw' });
    await s.directory.addUser({ username: 'bob', password: 'pw' });
    await s.directory.addUser({ username: 'root', password: 'pw', groups: ['admins'] });
    await s.directory.putPolicy({ name: 'all', effect: 'allow', actions: ['*'], resources: ['*:*'], principals: ['everyone'] });
    await s.directory.putPolicy({ name: 'no-secret-for-bob', effect: 'deny', actions: ['*'], resources: ['topic:secret/#'], principals: ['user:bob'] });
    const sources = new Sources();
    s.ac.sources = sources;
    return { ...s, sources };
  }

  it('reading a stream or queue needs that no deny of the reader reaches a filter feeding it', async () => {
    const { ac, sources } = await policies();
    sources.set('stream', 'vault', ['vault', 'secret/#']);
    sources.set('stream', 'everything', ['#']);
    sources.set('stream', 'orders', ['orders', 'shop/+/orders']);
    sources.set('queue', 'vq', ['secret/plans']);
    sources.set('queue', 'wild', ['+/plans']);
    const bob = ac.accessFor(ac.principal('bob'), 'kafka');
    const alice = ac.accessFor(ac.principal('alice'), 'kafka');
    const root = ac.accessFor(ac.principal('root'), 'kafka');
    for (const [kind, name] of [
      ['stream', 'vault'],
      ['stream', 'everything'],
      ['queue', 'vq'],
      ['queue', 'wild'],
    ] as const) {
      assert.equal(bob.can('subscribe', kind, name), false, `bob reads ${kind} ${name}`);
      assert.equal(ac.allows(bob.principal, 'subscribe', kind, name), false);
      assert.equal(alice.can('subscribe', kind, name), true, `alice reads ${kind} ${name}`);
      assert.equal(root.can('subscribe', kind, name), true, 'admins are allowed everything');
    }
    assert.equal(bob.can('subscribe', 'stream', 'orders'), true, 'a stream fed by allowed topics only');
    assert.equal(bob.can('publish', 'stream', 'vault'), false, 'his deny covers publish too: no writing into secret/# through the stream');
    assert.equal(bob.can('publish', 'stream', 'orders'), true);
    assert.equal(bob.can('describe', 'queue', 'vq'), true);
  });

  it('takes the verdict again when what feeds a stream changes', async () => {
    const { ac, sources } = await policies();
    sources.set('stream', 'logs', ['logs/#']);
    const bob = ac.accessFor(ac.principal('bob'), 'nats');
    assert.equal(bob.can('subscribe', 'stream', 'logs'), true);
    const v = ac.version;
    sources.set('stream', 'logs', ['logs/#', 'secret/audit']);
    assert.notEqual(ac.version, v);
    assert.equal(bob.can('subscribe', 'stream', 'logs'), false, 'the cached yes was dropped when the bindings changed');
    sources.set('stream', 'logs', ['logs/#']);
    assert.equal(bob.can('subscribe', 'stream', 'logs'), true);
  });

  it('binding a filter needs subscribe on every topic it matches; not being allowed is not being denied for reading', async () => {
    const { ac, directory, sources } = await policies();
    const bob = ac.accessFor(ac.principal('bob'), 'http');
    assert.equal(bob.mayBind('secret/#'), false);
    assert.equal(bob.mayBind('#'), false, '# reaches secret/#');
    assert.equal(bob.mayBind('+/plans'), false);
    assert.equal(bob.mayBind('news/#'), true);
    // Only streams allowed, no topic policy at all: reading a stream is not refused for lack of a topic allow.
    await directory.deletePolicy('all');
    await directory.putPolicy({ name: 'streams', effect: 'allow', actions: ['*'], resources: ['stream:*'], principals: ['everyone'] });
    sources.set('stream', 'news', ['news/#']);
    const alice = ac.accessFor(ac.principal('alice'), 'kafka');
    assert.equal(alice.can('subscribe', 'stream', 'news'), true);
    assert.equal(alice.mayBind('news/#'), false, 'but binding needs the topic allowed');
  });
});

describe('AccessControl: a stream does not launder a publish deny', () => {
  it('producing to a stream needs that no publish deny of the writer reaches its topics', async () => {
    const s = await setup();
    await s.directory.addUser({ username: 'bob', password: 'pw' });
    await s.directory.putPolicy({ name: 'all', effect: 'allow', actions: ['*'], resources: ['*:*'], principals: ['everyone'] });
    await s.directory.putPolicy({
      name: 'bob-no-secret-writes',
      effect: 'deny',
      actions: ['publish'],
      resources: ['topic:secret/#'],
      principals: ['user:bob'],
    });
    const feeds = new Map<string, string[]>([
      ['secret.k', ['secret/k']],
      ['orders', ['orders']],
    ]);
    s.ac.sources = { sourcesVersion: 1, topicFiltersFeeding: (_kind, name) => feeds.get(name) ?? [] };
    const bob = s.ac.accessFor(s.ac.principal('bob'), 'kafka');
    assert.equal(bob.can('publish', 'stream', 'secret.k'), false);
    assert.equal(bob.can('publish', 'stream', 'orders'), true);
    assert.equal(bob.can('subscribe', 'stream', 'secret.k'), true, 'only publish is denied');
  });
});
