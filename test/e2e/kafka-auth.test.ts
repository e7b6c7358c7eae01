/**
 * Kafka authentication and authorization with real clients (KafkaJS, kcat/librdkafka) against a broker started in
 * this process (so the test can change policies, users and quotas live through `broker.access.directory`, as the
 * admin API does): wrong passwords refused, unauthorized produce and consume refused with
 * TOPIC_/GROUP_AUTHORIZATION_FAILED, denied topics left out of Metadata, a policy changed live on an open
 * connection, ACLs created, listed and deleted with KafkaJS's admin client, a namespace connection quota, and the
 * client registry (list, kick).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import kafkajsPkg, { type SASLOptions } from 'kafkajs';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { eventually, kcatConsume, run } from './harness.js';

const { Kafka, logLevel, AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes } = kafkajsPkg;

const FAST = ['-X', 'fetch.wait.max.ms=50'];

function kafka(broker: string, sasl?: SASLOptions, clientId = 'auth-e2e') {
  return new Kafka({ clientId, brokers: [broker], sasl, logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 5000 });
}
const plain = (username: string, password: string): SASLOptions => ({ mechanism: 'plain', username, password });
const scram = (username: string, password: string): SASLOptions => ({ mechanism: 'scram-sha-256', username, password });
const kcatSasl = (user: string, pass: string) => [
  '-X',
  'security.protocol=SASL_PLAINTEXT',
  '-X',
  'sasl.mechanisms=SCRAM-SHA-512',
  '-X',
  `sasl.username=${user}`,
  '-X',
  `sasl.password=${pass}`,
];

/** KafkaJS wraps protocol errors (retries exhausted, non-retriable): the type named anywhere in the chain. */
function kafkaErrorType(err: unknown): string {
  const seen: string[] = [];
  let e = err as { type?: string; message?: string; originalError?: unknown; cause?: unknown } | undefined;
  for (let i = 0; e && i < 5; i++) {
    if (e.type) seen.push(e.type);
    seen.push(e.message ?? '');
    e = (e.originalError ?? e.cause) as typeof e;
  }
  return seen.join(' | ');
}

describe('kafka authentication and authorization (KafkaJS, kcat)', () => {
  let dir = '';
  let broker: Broker;
  let addr = '';

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-kafka-auth-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: alice-pw\n');
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'kafka',
      'kafka-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      // No KIP-134 initial rebalance delay: each group here has one member; 3 s per group proves nothing.
      'kafka-group-initial-rebalance-delay': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    addr = `127.0.0.1:${broker.listeners.get('kafka')!.address().port}`;
    const d = broker.access.directory;
    await d.addUser({ username: 'root', password: 'root-pw', groups: ['admins'] });
    await d.addUser({ username: 'mallory', password: 'mallory-pw' });
    await broker.engine.createStream({ name: 'secret', partitions: 1 });
    await broker.engine.createStream({ name: 'orders.live', partitions: 1 });
    // From here on, what no policy allows is denied (default policy auto).
    await d.putPolicy({
      name: 'alice-orders',
      effect: 'allow',
      actions: ['publish', 'subscribe', 'describe', 'create'],
      resources: ['stream:orders*'],
      principals: ['user:alice'],
    });
    await d.putPolicy({ name: 'alice-groups', effect: 'allow', actions: ['subscribe', 'describe'], resources: ['group:g-*'], principals: ['user:alice'] });
  });
  after(async () => {
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a wrong password or an unknown user (KafkaJS PLAIN and SCRAM, kcat SCRAM)', async () => {
    for (const sasl of [plain('alice', 'wrong'), scram('alice', 'wrong'), plain('nobody', 'alice-pw')]) {
      const p = kafka(addr, sasl).producer();
      await assert.rejects(p.connect(), (e: Error) => e.name === 'KafkaJSSASLAuthenticationError', sasl.mechanism);
      await p.disconnect();
    }
    const r = await run('kcat', ['-b', addr, '-L', ...kcatSasl('alice', 'wrong')], { timeoutMs: 20_000 });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /Authentication failed|SASL authentication error/i);
    // The right password works, over both mechanisms.
    for (const sasl of [plain('alice', 'alice-pw'), scram('alice', 'alice-pw')]) {
      const p = kafka(addr, sasl).producer();
      await p.connect();
      await p.send({ topic: 'orders.a', messages: [{ value: sasl.mechanism }] });
      await p.disconnect();
    }
  });

  it('refuses an unauthorized produce with TOPIC_AUTHORIZATION_FAILED and stores nothing', async () => {
    const p = kafka(addr, plain('alice', 'alice-pw')).producer();
    await p.connect();
    try {
      await assert.rejects(p.send({ topic: 'secret', messages: [{ value: 'leak' }] }), (e: unknown) => /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)));
      // Auto-creating a topic outside the allowed prefix is refused the same way.
      await assert.rejects(p.send({ topic: 'elsewhere', messages: [{ value: 'x' }] }), (e: unknown) => /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)));
    } finally {
      await p.disconnect();
    }
    assert.equal(broker.engine.offsets('secret', 0).highWatermark, 0);
    assert.equal(broker.engine.getStream('elsewhere'), undefined);
  });

  it('leaves topics the client may not describe out of Metadata (KafkaJS listTopics, kcat -L)', async () => {
    const a = kafka(addr, plain('alice', 'alice-pw')).admin();
    await a.connect();
    const aliceSees = await a.listTopics();
    await a.disconnect();
    assert.ok(aliceSees.includes('orders.a'));
    assert.ok(!aliceSees.includes('secret'));
    const r = kafka(addr, plain('root', 'root-pw')).admin();
    await r.connect();
    assert.ok((await r.listTopics()).includes('secret'), 'an admin sees every topic');
    await r.disconnect();
    const k = await run('kcat', ['-b', addr, '-L', ...kcatSasl('alice', 'alice-pw')], { timeoutMs: 20_000 });
    assert.equal(k.code, 0, k.stderr);
    assert.match(k.stdout, /topic "orders\.a"/);
    assert.doesNotMatch(k.stdout, /topic "secret"/);
  });

  it('refuses an unauthorized consume: a denied topic (KafkaJS, kcat) and a denied group (GROUP_AUTHORIZATION_FAILED)', async () => {
    const c = kafka(addr, plain('alice', 'alice-pw')).consumer({ groupId: 'g-1' });
    await c.connect();
    await assert.rejects(c.subscribe({ topics: ['secret'], fromBeginning: true }), (e: unknown) => /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)));
    await c.disconnect();

    const k = await run('kcat', ['-b', addr, '-C', '-t', 'secret', '-p', '0', '-o', 'beginning', '-e', ...kcatSasl('alice', 'alice-pw'), ...FAST], {
      timeoutMs: 20_000,
    });
    assert.match(k.stderr, /Topic authorization failed|not authorized/i, k.stderr);

    // KafkaJS reports a refused FindCoordinator as "Failed to find group coordinator"; the error it got from the
    // broker is in its debug log.
    const seen: string[] = [];
    const logged = new Kafka({
      clientId: 'auth-e2e',
      brokers: [addr],
      sasl: plain('alice', 'alice-pw'),
      retry: { retries: 0 },
      logLevel: logLevel.DEBUG,
      logCreator: () => (entry) => {
        const e = (entry.log as { error?: { type?: string } }).error;
        if (e?.type) seen.push(e.type);
      },
    });
    const other = logged.consumer({ groupId: 'not-hers', retry: { retries: 0 } });
    const crashed = new Promise<unknown>((resolve) => other.on(other.events.CRASH, (e) => resolve(e.payload.error)));
    await other.connect();
    await other.subscribe({ topics: ['orders.a'], fromBeginning: true });
    await other.run({ eachMessage: async () => undefined });
    assert.match(kafkaErrorType(await crashed), /group coordinator/);
    assert.ok(seen.includes('GROUP_AUTHORIZATION_FAILED'), seen.join(', '));
    await other.disconnect();

    // Allowed group and topic: consumed.
    const ok = kafka(addr, scram('alice', 'alice-pw')).consumer({ groupId: 'g-ok' });
    const got: string[] = [];
    await ok.connect();
    await ok.subscribe({ topics: ['orders.a'], fromBeginning: true });
    await ok.run({ eachMessage: async ({ message }) => void got.push(String(message.value)) });
    await eventually(() => got.length >= 2, 20_000, 'messages consumed');
    await ok.disconnect();
  });

  it('applies a policy changed live to an open connection (KafkaJS producer, kcat consumer)', async () => {
    const p = kafka(addr, plain('alice', 'alice-pw')).producer();
    await p.connect();
    try {
      await p.send({ topic: 'orders.live', messages: [{ value: 'before' }] });
      await broker.access.directory.putPolicy({
        name: 'no-live',
        effect: 'deny',
        actions: ['publish'],
        resources: ['stream:orders.live'],
        principals: ['user:alice'],
      });
      // The same connection (KafkaJS keeps it) is refused now: deny wins.
      await assert.rejects(p.send({ topic: 'orders.live', messages: [{ value: 'during' }] }), (e: unknown) =>
        /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)),
      );
      await broker.access.directory.deletePolicy('no-live');
      await p.send({ topic: 'orders.live', messages: [{ value: 'after' }] });
    } finally {
      await p.disconnect();
    }
    const msgs = await kcatConsume(addr, 'orders.live', [...kcatSasl('alice', 'alice-pw'), ...FAST]);
    assert.deepEqual(
      msgs.map((m) => m.payload),
      ['before', 'after'],
    );
  });

  it('maps DescribeAcls, CreateAcls and DeleteAcls onto policies (KafkaJS admin)', async () => {
    await broker.engine.createStream({ name: 'acl.t', partitions: 1 });
    const root = kafka(addr, plain('root', 'root-pw')).admin();
    const alice = kafka(addr, plain('alice', 'alice-pw')).producer();
    await root.connect();
    await alice.connect();
    try {
      await assert.rejects(alice.send({ topic: 'acl.t', messages: [{ value: 'no' }] }), (e: unknown) => /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)));
      const acl = {
        resourceType: AclResourceTypes.TOPIC,
        resourceName: 'acl.',
        resourcePatternType: ResourcePatternTypes.PREFIXED,
        principal: 'User:alice',
        host: '*',
        operation: AclOperationTypes.WRITE,
        permissionType: AclPermissionTypes.ALLOW,
      };
      await root.createAcls({ acl: [acl, { ...acl, operation: AclOperationTypes.DESCRIBE }] });
      const policy = broker.access.directory.policies.defs().find((d) => d.source === 'kafka-acl' && d.actions[0] === 'publish');
      assert.deepEqual(policy && { effect: policy.effect, actions: policy.actions, resources: policy.resources, principals: policy.principals }, {
        effect: 'allow',
        actions: ['publish'],
        resources: ['stream:acl.*'],
        principals: ['user:alice'],
      });
      // The ACL applies at once, on alice's open connection.
      await alice.send({ topic: 'acl.t', messages: [{ value: 'yes' }] });

      const described = await root.describeAcls({
        resourceType: AclResourceTypes.ANY,
        resourcePatternType: ResourcePatternTypes.ANY,
        operation: AclOperationTypes.ANY,
        permissionType: AclPermissionTypes.ANY,
        principal: 'User:alice',
      });
      const flat = described.resources.flatMap((r) =>
        r.acls.map((a) => `${r.resourceType}:${r.resourcePatternType}:${r.resourceName}:${a.operation}:${a.permissionType}`),
      );
      // The ACLs just made, and the policies made elsewhere (alice-orders, alice-groups) as ACLs.
      assert.ok(
        flat.includes(`${AclResourceTypes.TOPIC}:${ResourcePatternTypes.PREFIXED}:acl.:${AclOperationTypes.WRITE}:${AclPermissionTypes.ALLOW}`),
        flat.join('\n'),
      );
      assert.ok(
        flat.includes(`${AclResourceTypes.TOPIC}:${ResourcePatternTypes.PREFIXED}:orders:${AclOperationTypes.READ}:${AclPermissionTypes.ALLOW}`),
        flat.join('\n'),
      );
      assert.ok(
        flat.includes(`${AclResourceTypes.GROUP}:${ResourcePatternTypes.PREFIXED}:g-:${AclOperationTypes.READ}:${AclPermissionTypes.ALLOW}`),
        flat.join('\n'),
      );

      // Host-based ACLs do not map.
      await assert.rejects(root.createAcls({ acl: [{ ...acl, host: '10.0.0.1' }] }), (e: unknown) => /INVALID_REQUEST/.test(kafkaErrorType(e)));

      const deleted = await root.deleteAcls({
        filters: [
          {
            resourceType: AclResourceTypes.TOPIC,
            resourceName: 'acl.',
            resourcePatternType: ResourcePatternTypes.PREFIXED,
            principal: 'User:alice',
            host: '*',
            operation: AclOperationTypes.ANY,
            permissionType: AclPermissionTypes.ANY,
          },
        ],
      });
      assert.equal(deleted.filterResponses[0].matchingAcls.length, 2);
      assert.ok(!broker.access.directory.policies.defs().some((d) => d.source === 'kafka-acl'));
      await assert.rejects(alice.send({ topic: 'acl.t', messages: [{ value: 'no again' }] }), (e: unknown) =>
        /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)),
      );

      // Only principals allowed `alter cluster:*` manage ACLs.
      const a2 = kafka(addr, plain('alice', 'alice-pw')).admin();
      await a2.connect();
      await assert.rejects(a2.createAcls({ acl: [acl] }), (e: unknown) => /CLUSTER_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)));
      await a2.disconnect();
    } finally {
      await alice.disconnect();
      await root.disconnect();
    }
  });

  it('lists Kafka clients in the registry with user and client.id, and kicks one', async () => {
    const a = kafka(addr, plain('alice', 'alice-pw'), 'registry-client').admin();
    await a.connect();
    await a.listTopics();
    const entry = broker.access.clients.list().find((c) => c.reg.protocol === 'kafka' && c.clientId === 'registry-client');
    assert.ok(entry, 'registered');
    assert.equal(entry.user, 'alice');
    assert.equal(entry.namespace, 'default');
    assert.ok(broker.access.clients.kick(entry.id));
    await eventually(() => broker.access.clients.get(entry.id) === undefined, 10_000, 'the kicked client leaves the registry');
    await a.disconnect();
  });

  it('refuses a connection over the namespace connection quota after the SASL step', async () => {
    const d = broker.access.directory;
    await d.putNamespace({ name: 'tenant', quotas: { maxConnections: 1 } });
    await d.addUser({ username: 'carol', password: 'carol-pw', namespace: 'tenant' });
    await d.putPolicy({ name: 'carol-all', effect: 'allow', actions: ['*'], resources: ['stream:*'], principals: ['user:carol'] });
    const first = kafka(addr, plain('carol', 'carol-pw')).admin();
    await first.connect();
    await first.listTopics();
    const second = kafka(addr, plain('carol', 'carol-pw')).admin();
    await assert.rejects(second.connect().then(() => second.listTopics()));
    await second.disconnect();
    assert.ok((broker.access.quotas.figures().tenant?.refusedConnections ?? 0) >= 1);
    await first.disconnect();
    // The lease went back with the connection: a new one is let in.
    await eventually(() => (broker.access.quotas.figures().tenant?.connections ?? 1) === 0, 10_000, 'lease released');
    const third = kafka(addr, plain('carol', 'carol-pw')).admin();
    await third.connect();
    await third.listTopics();
    await third.disconnect();
  });
});
