/**
 * Namespace administrators (issue 29): `allow admin namespace:t1` makes ann the administrator of t1 only. On a real
 * bin/flowmq with a users file, through the admin API (HTTP Basic as each user), the `flowmq` CLI and a real Kafka
 * client (kafkajs) making a t1 topic: ann sees and manages t1's users, policies and streams, other namespaces'
 * objects answer 404 exactly as absent ones do and are left out of lists, the broker's own operations answer 403,
 * and nothing she writes reaches outside t1 (no global policy, no `admins` group, no other namespace).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import kafkajsPkg from 'kafkajs';
import { FlowmqProcess, type RunResult } from './harness.js';
import { CliRunner } from './cli-runner.js';

const { Kafka, logLevel, AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes } = kafkajsPkg;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const USERS = `
users:
  - {username: root, password: root-pw, groups: [admins]}
  - {username: dee, password: dee-pw}
  - {username: ann, password: ann-pw, namespace: t1}
  - {username: tia, password: tia-pw, namespace: t1}
  - {username: bob, password: bob-pw, namespace: t2}
groups: [ops]
namespaces:
  - {name: t1}
  - {name: t2}
policies:
  - {name: ann-admin, effect: allow, actions: [admin], resources: ["namespace:t1"], principals: ["user:ann"]}
  - {name: ops-all, effect: allow, actions: ["*"], resources: ["cluster:*"], principals: ["group:ops"]}
  - {name: dee-streams, effect: allow, actions: ["*"], resources: ["stream:*", "topic:#"], principals: ["user:dee"]}
`;

interface Answer<T = unknown> {
  status: number;
  body: T;
}

describe('e2e: namespace administrators', { timeout: 60_000 }, () => {
  let dir = '';
  let broker: FlowmqProcess;
  let runner: CliRunner;

  /** One admin API request as `user` (password `<user>-pw`): the status and the parsed body, whatever the status. */
  async function call<T = Record<string, unknown>>(user: string, method: string, path: string, body?: unknown): Promise<Answer<T>> {
    const headers: Record<string, string> = { authorization: `Basic ${Buffer.from(`${user}:${user}-pw`).toString('base64')}` };
    if (method !== 'GET') headers['content-type'] = 'application/json';
    const res = await fetch(broker.http + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : null) as T };
  }
  const names = async (user: string, path: string, key = 'name'): Promise<string[]> => {
    const r = await call<{ items: Array<Record<string, string>> }>(user, 'GET', path);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.items.map((i) => i[key]).sort();
  };
  const cli = (user: string, args: string[]): Promise<RunResult> =>
    runner.run([...args, '--server', broker.http], { FLOWMQ_USER: user, FLOWMQ_PASSWORD: `${user}-pw` });

  /** The 404 of a name nobody has, with `name` written in place of the absent one: what another namespace's must equal. */
  async function sameAsAbsent(user: string, method: string, path: string, absentPath: string, name: string, absent: string, body?: unknown) {
    const hidden = await call(user, method, path, body);
    const none = await call(user, method, absentPath, body);
    assert.equal(hidden.status, 404, `${method} ${path}: ${JSON.stringify(hidden.body)}`);
    assert.equal(none.status, 404, `${method} ${absentPath}: ${JSON.stringify(none.body)}`);
    assert.deepEqual(hidden.body, JSON.parse(JSON.stringify(none.body).split(absent).join(name)));
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-admins-'));
    writeFileSync(join(dir, 'users.yaml'), USERS);
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml')] });
    runner = CliRunner.start();
  });
  after(async () => {
    runner?.close();
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('tells each caller which namespaces it administers', async () => {
    const ann = await call<{ admin: boolean; adminNamespaces: string[] }>('ann', 'GET', '/api/v1/session');
    assert.equal(ann.status, 200);
    assert.equal(ann.body.admin, false);
    assert.deepEqual(ann.body.adminNamespaces, ['t1']);
    const root = await call<{ admin: boolean; adminNamespaces: string[] }>('root', 'GET', '/api/v1/session');
    assert.equal(root.body.admin, true);
    assert.deepEqual([...root.body.adminNamespaces].sort(), ['default', 't1', 't2']);
    const tia = await call<{ admin: boolean; adminNamespaces: string[] }>('tia', 'GET', '/api/v1/session');
    assert.equal(tia.body.admin, false);
    assert.deepEqual(tia.body.adminNamespaces, []);
    // A plain user is refused the administrators' lists, as before.
    for (const path of ['/api/v1/users', '/api/v1/policies', '/api/v1/namespaces']) {
      assert.equal((await call('tia', 'GET', path)).status, 403, path);
    }
  });

  it("sees and manages t1's users only; another namespace's user is absent for her", async () => {
    assert.deepEqual(await names('ann', '/api/v1/users', 'username'), ['ann', 'tia']);
    assert.deepEqual(await names('root', '/api/v1/users', 'username'), ['ann', 'bob', 'dee', 'root', 'tia']);
    await sameAsAbsent('ann', 'GET', '/api/v1/users/bob', '/api/v1/users/nobody', 'bob', 'nobody');
    await sameAsAbsent('ann', 'GET', '/api/v1/users/root', '/api/v1/users/nobody', 'root', 'nobody');
    await sameAsAbsent('ann', 'DELETE', '/api/v1/users/bob', '/api/v1/users/nobody', 'bob', 'nobody');
    await sameAsAbsent('ann', 'PATCH', '/api/v1/users/dee', '/api/v1/users/nobody', 'dee', 'nobody', { password: 'taken-over' });

    // A new user lands in t1; another namespace, or a group with rights outside t1, is refused.
    const carl = await call<{ namespace: string }>('ann', 'POST', '/api/v1/users', { username: 'carl', password: 'carl-pw' });
    assert.equal(carl.status, 201, JSON.stringify(carl.body));
    assert.equal(carl.body.namespace, 't1');
    assert.equal((await call('ann', 'POST', '/api/v1/users', { username: 'eve', password: 'eve-pw', namespace: 't2' })).status, 403);
    assert.equal((await call('ann', 'POST', '/api/v1/users', { username: 'eve', password: 'eve-pw', groups: ['admins'] })).status, 403);
    assert.equal((await call('ann', 'POST', '/api/v1/users', { username: 'eve', password: 'eve-pw', groups: ['ops'] })).status, 403);
    assert.equal((await call('ann', 'PATCH', '/api/v1/users/carl', { groups: ['admins'] })).status, 403);
    assert.equal((await call('ann', 'PATCH', '/api/v1/users/carl', { namespace: 't2' })).status, 403);
    assert.equal((await call('ann', 'PATCH', '/api/v1/users/carl', { namespace: 'default' })).status, 403);
    assert.equal((await call('root', 'GET', '/api/v1/users/eve')).status, 404, 'no refused request made eve');
    // A group nobody outside t1 gives rights to is hers to give.
    const grouped = await call<{ groups: string[] }>('ann', 'PATCH', '/api/v1/users/carl', { groups: ['t1-readers'] });
    assert.equal(grouped.status, 200, JSON.stringify(grouped.body));
    assert.deepEqual(grouped.body.groups, ['t1-readers']);
    assert.equal((await call('carl', 'GET', '/api/v1/users')).status, 403, 'carl administers nothing');
    assert.equal((await call('ann', 'DELETE', '/api/v1/users/carl')).status, 204);
    assert.equal((await call('root', 'GET', '/api/v1/users/carl')).status, 404);
  });

  it("writes policies inside t1 only, and they reach t1's principals only", async () => {
    // Without a namespace, in another one, or naming the broker or a namespace: refused.
    const base = { effect: 'allow', actions: ['*'], resources: ['stream:*', 'topic:#'], principals: ['user:tia'] };
    assert.equal((await call('ann', 'POST', '/api/v1/policies', { name: 'g1', ...base })).status, 403);
    assert.equal((await call('ann', 'POST', '/api/v1/policies', { name: 'g1', ...base, namespace: 't2' })).status, 403);
    const cluster = await call<{ error: { message: string } }>('ann', 'POST', '/api/v1/policies', {
      name: 'g1',
      ...base,
      resources: ['cluster:*'],
      principals: ['user:ann'],
      namespace: 't1',
    });
    assert.equal(cluster.status, 400);
    assert.match(cluster.body.error.message, /scoped to a namespace cannot name the kinds cluster and namespace/);
    const nsKind = await call('ann', 'POST', '/api/v1/policies', { name: 'g1', ...base, resources: ['namespace:t2'], actions: ['admin'], namespace: 't1' });
    assert.equal(nsKind.status, 400);

    // `*:*` scoped to t1 for herself: still no broker administrator, still nothing of t2.
    const all = await call<{ namespace: string }>('ann', 'POST', '/api/v1/policies', {
      name: 'ann-all',
      effect: 'allow',
      actions: ['*'],
      resources: ['*:*'],
      principals: ['user:ann', 'user:dee'],
      namespace: 't1',
    });
    assert.equal(all.status, 201, JSON.stringify(all.body));
    assert.equal(all.body.namespace, 't1');
    assert.equal((await call('ann', 'GET', '/api/v1/cluster')).status, 403);
    assert.equal((await call('ann', 'GET', '/api/v1/broker')).status, 403);
    assert.equal((await call('ann', 'PUT', '/api/v1/log-level', { level: 'debug' })).status, 403);
    assert.equal((await call('ann', 'GET', '/api/v1/groups')).status, 403);
    assert.equal((await call('ann', 'GET', '/api/v1/namespaces/t2')).status, 404);
    const session = await call<{ admin: boolean; adminNamespaces: string[] }>('ann', 'GET', '/api/v1/session');
    assert.equal(session.body.admin, false);
    assert.deepEqual(session.body.adminNamespaces, ['t1']);
    // dee is of `default`: a t1 policy naming her gives her nothing (she still may not read the broker's status).
    assert.equal((await call('dee', 'GET', '/api/v1/broker')).status, 403);

    // She lists t1's policies only; global and other namespaces' ones are absent for her.
    assert.deepEqual(await names('ann', '/api/v1/policies'), ['ann-all']);
    assert.deepEqual(await names('root', '/api/v1/policies?namespace=t1'), ['ann-all']);
    await sameAsAbsent('ann', 'GET', '/api/v1/policies/ann-admin', '/api/v1/policies/nothing', 'ann-admin', 'nothing');
    await sameAsAbsent('ann', 'DELETE', '/api/v1/policies/ops-all', '/api/v1/policies/nothing', 'ops-all', 'nothing');
    // Names are one space: a global policy's name cannot be taken over by a PUT.
    const put = await call('ann', 'PUT', '/api/v1/policies/ann-admin', { ...base, namespace: 't1' });
    assert.equal(put.status, 409);
    const kept = await call<{ namespace: string | null; principals: string[] }>('root', 'GET', '/api/v1/policies/ann-admin');
    assert.equal(kept.body.namespace, null);
    assert.deepEqual(kept.body.principals, ['user:ann']);
    assert.equal((await call('root', 'DELETE', '/api/v1/policies/ann-all')).status, 204);
  });

  it("reads namespaces and t1's usage, but making or changing namespaces is the broker administrator's", async () => {
    assert.deepEqual(await names('ann', '/api/v1/namespaces'), ['t1']);
    assert.equal((await call('ann', 'GET', '/api/v1/namespaces/t1/usage')).status, 200);
    await sameAsAbsent('ann', 'GET', '/api/v1/namespaces/t2', '/api/v1/namespaces/nowhere', 't2', 'nowhere');
    await sameAsAbsent('ann', 'GET', '/api/v1/namespaces/default/usage', '/api/v1/namespaces/nowhere/usage', 'default', 'nowhere');
    assert.equal((await call('ann', 'POST', '/api/v1/namespaces', { name: 't3' })).status, 403);
    assert.equal((await call('ann', 'PATCH', '/api/v1/namespaces/t1', { quotas: { maxConnections: 1000 } })).status, 403);
    assert.equal((await call('ann', 'DELETE', '/api/v1/namespaces/t1')).status, 403);
    assert.equal((await call('root', 'GET', '/api/v1/namespaces/t3')).status, 404);
  });

  it("manages t1's streams (made by a Kafka client of t1) and does not see default's", async () => {
    const policy = await call('ann', 'POST', '/api/v1/policies', {
      name: 't1-kafka',
      effect: 'allow',
      actions: ['*'],
      resources: ['stream:*', 'topic:#', 'group:*'],
      principals: ['user:tia'],
      namespace: 't1',
    });
    assert.equal(policy.status, 201, JSON.stringify(policy.body));
    const kafka = new Kafka({
      brokers: [broker.kafka],
      clientId: 'ns-admins',
      logLevel: logLevel.NOTHING,
      sasl: { mechanism: 'plain', username: 'tia', password: 'tia-pw' },
      retry: { retries: 3 },
    });
    const admin = kafka.admin();
    await admin.connect();
    try {
      assert.equal(await admin.createTopics({ topics: [{ topic: 'orders', numPartitions: 1 }], waitForLeaders: true }), true);
    } finally {
      await admin.disconnect();
    }
    const made = await call('root', 'POST', '/api/v1/streams', { name: 'orders', partitions: 1 });
    assert.equal(made.status, 201, JSON.stringify(made.body));

    assert.deepEqual(await names('root', '/api/v1/streams'), ['orders', 't1~orders']);
    assert.deepEqual(await names('ann', '/api/v1/streams'), ['t1~orders']);
    assert.equal((await call('ann', 'GET', '/api/v1/streams/t1~orders')).status, 200);
    // dee (of default, allowed stream:*) sees default's streams only: t1's is absent for her too.
    assert.deepEqual(await names('dee', '/api/v1/streams'), ['orders']);
    await sameAsAbsent('dee', 'GET', '/api/v1/streams/t1~orders', '/api/v1/streams/t1~nothing', 't1~orders', 't1~nothing');
    await sameAsAbsent('ann', 'GET', '/api/v1/streams/orders', '/api/v1/streams/nothing', 'orders', 'nothing');
    await sameAsAbsent('ann', 'DELETE', '/api/v1/streams/orders', '/api/v1/streams/nothing', 'orders', 'nothing');
    await sameAsAbsent('ann', 'GET', '/api/v1/streams/t2~x', '/api/v1/streams/t2~nothing', 't2~x', 't2~nothing');
    assert.equal((await call('ann', 'DELETE', '/api/v1/streams/t1~orders')).status, 204);
    assert.deepEqual(await names('root', '/api/v1/streams'), ['orders']);
    assert.equal((await call('root', 'DELETE', '/api/v1/policies/t1-kafka')).status, 204);
  });

  it("manages t1's ACLs through Kafka's ACL APIs: policies scoped to t1 only; others are refused or see none of them", async () => {
    const client = (user: string) =>
      new Kafka({
        brokers: [broker.kafka],
        clientId: `acl-${user}`,
        logLevel: logLevel.NOTHING,
        sasl: { mechanism: 'plain', username: user, password: `${user}-pw` },
        retry: { retries: 0 },
      }).admin();
    const ANY = {
      resourceType: AclResourceTypes.ANY,
      resourcePatternType: ResourcePatternTypes.ANY,
      operation: AclOperationTypes.ANY,
      permissionType: AclPermissionTypes.ANY,
    };
    const tiaWrites = {
      resourceType: AclResourceTypes.TOPIC,
      resourceName: 'orders',
      resourcePatternType: ResourcePatternTypes.LITERAL,
      principal: 'User:tia',
      host: '*',
      operation: AclOperationTypes.WRITE,
      permissionType: AclPermissionTypes.ALLOW,
    };
    const ann = client('ann');
    await ann.connect();
    try {
      // Before: t1 has no ACL, whatever default has (ann-admin, ops-all, dee-streams map to ACLs of default).
      assert.deepEqual((await ann.describeAcls(ANY)).resources, []);
      await ann.createAcls({ acl: [tiaWrites] });
      const listed = (await ann.describeAcls(ANY)).resources;
      assert.deepEqual(
        listed.map((r) => ({ type: r.resourceType, name: r.resourceName, acls: r.acls.map((a) => `${a.principal} ${a.operation} ${a.permissionType}`) })),
        [{ type: AclResourceTypes.TOPIC, name: 'orders', acls: [`User:tia ${AclOperationTypes.WRITE} ${AclPermissionTypes.ALLOW}`] }],
      );
      // The cluster is not a namespace's to grant.
      await assert.rejects(
        ann.createAcls({ acl: [{ ...tiaWrites, resourceType: AclResourceTypes.CLUSTER, resourceName: 'kafka-cluster' }] }),
        (e: { type?: string }) => e.type === 'INVALID_REQUEST',
      );
    } finally {
      await ann.disconnect();
    }
    // It is a policy scoped to t1, naming t1's own `orders`.
    const policies = await call<{ items: Array<{ name: string; namespace?: string | null; resources: string[]; principals: string[]; source?: string }> }>(
      'root',
      'GET',
      '/api/v1/policies',
    );
    const made = policies.body.items.filter((p) => p.source === 'kafka-acl');
    assert.deepEqual(
      made.map((p) => ({ namespace: p.namespace, resources: p.resources, principals: p.principals })),
      [{ namespace: 't1', resources: ['stream:orders'], principals: ['user:tia'] }],
    );
    // A t1 user who is not its administrator, and t2's bob, are refused; default's administrator does not see t1's ACL.
    for (const user of ['tia', 'bob']) {
      const a = client(user);
      await a.connect();
      try {
        await assert.rejects(a.describeAcls(ANY), (e: { type?: string }) => e.type === 'CLUSTER_AUTHORIZATION_FAILED', user);
        await assert.rejects(a.createAcls({ acl: [tiaWrites] }), (e: { type?: string }) => e.type === 'CLUSTER_AUTHORIZATION_FAILED', user);
      } finally {
        await a.disconnect();
      }
    }
    const root = client('root');
    await root.connect();
    try {
      const all = (await root.describeAcls(ANY)).resources;
      assert.ok(all.length > 0, "default's own ACLs are listed");
      assert.ok(!all.some((r) => r.acls.some((a) => a.principal === 'User:tia')), JSON.stringify(all));
      // Nor does default's DeleteAcls reach it.
      const del = await root.deleteAcls({ filters: [{ ...ANY, principal: 'User:tia' }] });
      assert.deepEqual(del.filterResponses[0].matchingAcls, []);
    } finally {
      await root.disconnect();
    }
    const again = client('ann');
    await again.connect();
    try {
      const del = await again.deleteAcls({ filters: [{ ...ANY, principal: 'User:tia' }] });
      assert.equal(del.filterResponses[0].matchingAcls.length, 1);
      assert.deepEqual((await again.describeAcls(ANY)).resources, []);
    } finally {
      await again.disconnect();
    }
  });

  it('the CLI: policy add --namespace, a NAMESPACE column, lists scoped to the caller', async () => {
    const added = await cli('ann', [
      'policy',
      'add',
      't1-read',
      '--allow',
      '--action',
      'subscribe',
      '--resource',
      'topic:#',
      '--principal',
      'user:tia',
      '--namespace',
      't1',
    ]);
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, /added policy t1-read: allow subscribe on topic:# to user:tia/);
    const missing = await cli('ann', ['policy', 'add', 'loose', '--allow', '--action', 'subscribe', '--resource', 'topic:#', '--principal', 'user:tia']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /namespace administrator writes policies scoped to its namespace/);

    const mine = await cli('ann', ['policy', 'list']);
    assert.equal(mine.code, 0, mine.stderr);
    const lines = mine.stdout.trim().split('\n');
    assert.match(lines[0], /^NAME\s+NAMESPACE\s+EFFECT\s+ACTIONS/);
    assert.equal(lines.length, 2, mine.stdout);
    assert.match(lines[1], /^t1-read\s+t1\s+allow\s+subscribe/);

    const all = await cli('root', ['policy', 'list']);
    assert.equal(all.code, 0, all.stderr);
    assert.match(all.stdout, /^ann-admin\s+\*\s+allow\s+admin/m);
    assert.match(all.stdout, /^t1-read\s+t1\s+allow/m);
    const onlyT1 = await cli('root', ['policy', 'list', '--namespace', 't1', '--json']);
    assert.deepEqual(
      (JSON.parse(onlyT1.stdout) as Array<{ name: string }>).map((p) => p.name),
      ['t1-read'],
    );
    const shown = await cli('ann', ['policy', 'show', 't1-read']);
    assert.match(shown.stdout, /^namespace:\s+t1$/m);
    const hidden = await cli('ann', ['policy', 'show', 'ann-admin']);
    assert.equal(hidden.code, 1);
    assert.match(hidden.stderr, /policy "ann-admin" does not exist/);

    const users = await cli('ann', ['user', 'list', '--json']);
    assert.deepEqual((JSON.parse(users.stdout) as Array<{ username: string }>).map((u) => u.username).sort(), ['ann', 'tia']);
    const nss = await cli('ann', ['namespace', 'list', '--json']);
    assert.deepEqual(
      (JSON.parse(nss.stdout) as Array<{ name: string }>).map((n) => n.name),
      ['t1'],
    );
    const made = await cli('ann', ['namespace', 'add', 't9']);
    assert.equal(made.code, 1);
    assert.match(made.stderr, /403|may not admin cluster/);

    // A namespace without users is deleted with the policies scoped to it (as RabbitMQ deletes a vhost's permissions):
    // one made again under its name does not inherit them.
    assert.equal((await call('root', 'POST', '/api/v1/namespaces', { name: 't9' })).status, 201);
    const scopedP = { name: 't9-p', effect: 'allow', actions: ['publish'], resources: ['topic:#'], principals: ['everyone'], namespace: 't9' };
    assert.equal((await call('root', 'POST', '/api/v1/policies', scopedP)).status, 201);
    assert.equal((await call('root', 'DELETE', '/api/v1/namespaces/t9')).status, 204);
    assert.equal((await call('root', 'GET', '/api/v1/policies/t9-p')).status, 404);
  });
});
