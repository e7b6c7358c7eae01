/**
 * The users file (src/control/seed.ts): its formats and errors, and seeding the directory: only what is absent,
 * namespaces before the users naming them, and the password of a user the file created set again when the file's
 * changed (unless it was last set through the API).
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createUser } from 'nkeys.js';
import { Directory, PasswordVerifier, parseUsersFile, reloadDirectory, seedDirectory, type UsersFile } from '../../src/control/index.js';
import { MemoryControlStore } from '../../src/storage/metastore/control-store.js';

const verifier = new PasswordVerifier({ scrypt: { N: 1024, r: 8, p: 1 } });
after(() => verifier.close());

describe('users file: parsing', () => {
  it('parses a YAML list, a JSON document and a {users: [...]} mapping', () => {
    assert.deepEqual(parseUsersFile('- username: a\n  password: x\n- {username: b, password: "y:z"}\n', 'u.yaml').users, [
      { username: 'a', password: 'x' },
      { username: 'b', password: 'y:z' },
    ]);
    assert.deepEqual(parseUsersFile('{"users":[{"username":"c","password":"p"}]}', 'u.json'), {
      users: [{ username: 'c', password: 'p' }],
      groups: [],
      namespaces: [],
      policies: [],
    });
  });

  it('parses users with an nkey, with or without a password', () => {
    const a = createUser().getPublicKey();
    const b = createUser().getPublicKey();
    assert.deepEqual(parseUsersFile(`- {username: a, nkey: ${a}}\n- {username: b, password: x, nkey: ${b}}\n`, 'u.yaml').users, [
      { username: 'a', nkey: a },
      { username: 'b', password: 'x', nkey: b },
    ]);
  });

  it('parses groups, namespaces with quotas, policies, and users with groups and a namespace', () => {
    const f = parseUsersFile(
      `
users:
  - {username: admin, password: pw, groups: [admins]}
  - {username: s1, password: pw, groups: [sensors], namespace: plant-a}
groups: [sensors, {name: devs, description: developers}]
namespaces:
  - {name: plant-a, description: the plant, quotas: {maxConnections: 100, publishRate: 1000}}
  - {name: empty}
policies:
  - {name: sensors-publish, effect: allow, actions: [publish], resources: ["topic:sensors/#"], principals: ["group:sensors"]}
`,
      'u.yaml',
    );
    assert.deepEqual(f.users, [
      { username: 'admin', password: 'pw', groups: ['admins'] },
      { username: 's1', password: 'pw', groups: ['sensors'], namespace: 'plant-a' },
    ]);
    assert.deepEqual(f.groups, [{ name: 'sensors' }, { name: 'devs', description: 'developers' }]);
    assert.deepEqual(f.namespaces, [
      { name: 'plant-a', description: 'the plant', quotas: { maxConnections: 100, publishRate: 1000 } },
      { name: 'empty', quotas: {} },
    ]);
    assert.deepEqual(f.policies, [
      { name: 'sensors-publish', effect: 'allow', actions: ['publish'], resources: ['topic:sensors/#'], principals: ['group:sensors'], source: 'file' },
    ]);
  });

  it('names the entry and the problem, never the password', () => {
    const cases: Array<[string, RegExp]> = [
      ['username: a', /expected a list of \{username, password\}, or a mapping/],
      ['users: []\nextra: 1', /unknown key extra/],
      ['users: {a: 1}', /users must be a list/],
      ['- {username: "", password: x}', /entry 1: username must be a non-empty string/],
      ['- {username: a, password: x}\n- {username: a, password: hunter2}', /entry 2: duplicate username a/],
      ['- {username: a}', /entry 1 \(a\): a password or an nkey is needed/],
      ['- {username: a, password: ""}', /entry 1 \(a\): password must be a non-empty string/],
      ['- {username: a, nkey: UABC}', /entry 1 \(a\): nkey must be a user public NKey/],
      // A key of another kind (A: an account's) is no user key.
      ['- {username: a, nkey: ADGRMQC5RCLBDOLCSHO2WTDHPSRWZOBMHKGPDTRFUQK3BNODI7UDRWJU}', /nkey must be a user public NKey/],
      ['- [a, b]', /entry 1: expected \{username, password\}/],
      ['- {username: "a\\u0000", password: hunter2}', /control characters/],
      ['- {username: a, password: hunter2, groups: admins}', /entry 1 \(a\): groups must be a list/],
      ['- {username: a, password: hunter2, groups: ["bad name"]}', /entry 1 \(a\): group name must be/],
      ['- {username: a, password: hunter2, namespace: "a b"}', /entry 1 \(a\): namespace name must be/],
      ['namespaces: [{name: n, quotas: {maxConnections: -1}}]', /namespace 1 \(n\): quota maxConnections must be a number >= 0/],
      ['namespaces: [{quotas: {}}]', /namespace 1: namespace name must be/],
      ['groups: [[1]]', /group 1: expected a name or \{name, description\?\}/],
      ['policies: [{name: p, effect: allow, actions: [fly], resources: ["topic:a"], principals: [everyone]}]', /policy 1 \(p\): unknown action "fly"/],
      ['policies: [nope]', /policy 1: expected \{name, effect/],
      ['users: [{username: a, password: [unclosed', /users file u.yaml: /],
    ];
    for (const [text, re] of cases) {
      assert.throws(
        () => parseUsersFile(text, 'u.yaml'),
        (e: Error) => re.test(e.message) && e.message.startsWith('users file u.yaml') && !e.message.includes('hunter2'),
        text,
      );
    }
  });
});

describe('users file: seeding the directory', () => {
  const open = (store = new MemoryControlStore()) => Directory.open({ store, hasher: (p) => verifier.hash(p) });
  const verify = (pw: string, h: Parameters<PasswordVerifier['verify']>[1]) => verifier.verify(pw, h);
  const file = (over: Partial<UsersFile> = {}): UsersFile => ({
    users: [
      { username: 'admin', password: 'one', groups: ['admins'] },
      { username: 's1', password: 's1pw', groups: ['sensors'], namespace: 'plant-a' },
    ],
    groups: [{ name: 'sensors', description: 'devices' }],
    namespaces: [{ name: 'plant-a', quotas: { maxConnections: 5 } }],
    policies: [{ name: 'p', effect: 'allow', actions: ['publish'], resources: ['topic:sensors/#'], principals: ['group:sensors'], source: 'file' }],
    ...over,
  });

  it('creates everything once; a second start with the same file changes nothing', async () => {
    const store = new MemoryControlStore();
    const d = await open(store);
    assert.deepEqual(await seedDirectory(d, file(), 'u.yaml', verify), { users: 2, passwords: 0, groups: 1, namespaces: 1, policies: 1 });
    assert.deepEqual(d.user('s1')?.groups, ['sensors']);
    assert.equal(d.user('s1')?.namespace, 'plant-a');
    assert.equal(d.user('s1')?.source, 'file');
    assert.deepEqual(d.namespace('plant-a')?.quotas, { maxConnections: 5 });
    assert.equal(d.listGroups().find((g) => g.name === 'sensors')?.description, 'devices');
    assert.equal(d.policies.defs()[0].source, 'file');
    const v = await store.controlVersion();
    const again = await open(store);
    assert.deepEqual(await seedDirectory(again, file(), 'u.yaml', verify), { users: 0, passwords: 0, groups: 0, namespaces: 0, policies: 0 });
    assert.equal(await store.controlVersion(), v, 'nothing written');
  });

  it("leaves what the API changed: a policy, a namespace's quotas, a user's groups", async () => {
    const store = new MemoryControlStore();
    const d = await open(store);
    await seedDirectory(d, file(), 'u.yaml', verify);
    await d.putPolicy({ name: 'p', effect: 'deny', actions: ['*'], resources: ['*:*'], principals: ['user:x'] });
    await d.putNamespace({ name: 'plant-a', quotas: { maxConnections: 50 } });
    await d.updateUser('s1', { groups: [] });
    const again = await open(store);
    await seedDirectory(again, file(), 'u.yaml', verify);
    assert.equal(again.policies.defs()[0].effect, 'deny');
    assert.deepEqual(again.namespace('plant-a')?.quotas, { maxConnections: 50 });
    assert.deepEqual(again.user('s1')?.groups, []);
  });

  it("a reload (SIGHUP) makes the file's policies the truth for the policies the file made; the API's stay", async () => {
    const d = await open();
    await seedDirectory(d, file(), 'u.yaml', verify);
    await d.putPolicy({ name: 'api', effect: 'allow', actions: ['subscribe'], resources: ['topic:x'], principals: ['user:admin'], source: 'api' });
    const q = { name: 'q', effect: 'deny' as const, actions: ['subscribe'], resources: ['topic:q'], principals: ['user:admin'], source: 'file' };
    const changed = file({ policies: [{ ...file().policies[0]!, resources: ['topic:other/#'] }, q] });
    assert.deepEqual(await reloadDirectory(d, changed, 'u.yaml', verify), {
      users: 0,
      passwords: 0,
      groups: 0,
      namespaces: 0,
      policies: 1,
      policiesUpdated: 1,
      policiesRemoved: 0,
    });
    assert.deepEqual(d.policies.defs().find((x) => x.name === 'p')?.resources, ['topic:other/#']);
    const same = await reloadDirectory(d, changed, 'u.yaml', verify);
    assert.equal(same.policiesUpdated + same.policiesRemoved + same.policies, 0, 'the same file changes nothing');
    const removed = await reloadDirectory(d, file({ policies: [] }), 'u.yaml', verify);
    assert.equal(removed.policiesRemoved, 2);
    assert.deepEqual(
      d.policies.defs().map((x) => x.name),
      ['api'],
    );
  });

  it('sets the password of a file user again when the file changed it, unless it was set through the API since', async () => {
    const store = new MemoryControlStore();
    await seedDirectory(await open(store), file(), 'u.yaml', verify);
    const changed = file({
      users: [
        { username: 'admin', password: 'two', groups: ['admins'] },
        { username: 's1', password: 'new-s1', namespace: 'plant-a' },
      ],
    });
    const d = await open(store);
    await d.setPassword('s1', 'chosen-by-operator'); // through the API: wins over the file
    const hashBefore = d.lookup('s1')!.passwordHash;
    assert.deepEqual(await seedDirectory(d, changed, 'u.yaml', verify), { users: 0, passwords: 1, groups: 0, namespaces: 0, policies: 0 });
    assert.equal(await verifier.verify('two', d.lookup('admin')!.passwordHash), 'ok', "the file's new password applies");
    assert.equal(await verifier.verify('one', d.lookup('admin')!.passwordHash), 'bad');
    assert.equal(d.passwordSource('admin'), 'file', "still the file's: the next change of the file applies too");
    assert.deepEqual(d.lookup('s1')!.passwordHash, hashBefore, 'the API-set password is left alone');
    // The same file again: the passwords match, nothing is rehashed.
    assert.equal((await seedDirectory(d, changed, 'u.yaml', verify)).passwords, 0);
  });

  it("seeds an nkey user without a password, and applies the file's new nkey at the next start", async () => {
    const store = new MemoryControlStore();
    const k1 = createUser().getPublicKey();
    const k2 = createUser().getPublicKey();
    const d = await open(store);
    const withKey = (k: string) => file({ users: [{ username: 'svc', nkey: k }] });
    assert.equal((await seedDirectory(d, withKey(k1), 'u.yaml', verify)).users, 1);
    assert.equal(d.userByNkey(k1), 'svc');
    const again = await open(store);
    await seedDirectory(again, withKey(k2), 'u.yaml', verify);
    assert.equal(again.userByNkey(k2), 'svc');
    assert.equal(again.userByNkey(k1), undefined);
  });

  it('a user created through the API keeps its password whatever the file says', async () => {
    const store = new MemoryControlStore();
    const d = await open(store);
    await d.addUser({ username: 'admin', password: 'api-pw' });
    assert.equal((await seedDirectory(d, file(), 'u.yaml', verify)).passwords, 0);
    assert.equal(await verifier.verify('api-pw', d.lookup('admin')!.passwordHash), 'ok');
  });

  it('refuses a user in a namespace that neither the file nor the directory has', async () => {
    const d = await open();
    await assert.rejects(seedDirectory(d, file({ namespaces: [] }), 'u.yaml', verify), (e: Error) =>
      /users file u.yaml: user s1: namespace "plant-a" does not exist/.test(e.message),
    );
  });
});
