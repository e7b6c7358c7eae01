/**
 * The control plane on Kafka listeners, byte level: anonymous and SASL principals, authorization answers per API
 * (TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED, Metadata filtering), PLAIN through access.password (an external
 * authenticator for unknown users), quotas (throttle_time_ms on Produce and Fetch), anonymous refused when not
 * allowed, SECURITY_DISABLED without access control; and the ACL ↔ policy mapping as pure functions.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Engine, encodeBatch } from '../../../src/core/index.js';
import { AccessControl, Directory, PasswordGuard, type ExternalAuthenticator } from '../../../src/control/index.js';
import { MemoryControlStore } from '../../../src/storage/metastore/control-store.js';
import { accessSaslProvider } from '../../../src/protocols/kafka/auth.js';
import { bindingPolicy, filterMatches, policyBindings } from '../../../src/protocols/kafka/handlers/acls.js';
import { createKafkaAdapter, startKafkaListener } from '../../../src/protocols/kafka/index.js';
import {
  AclOperation as Op,
  AclPatternType as Pat,
  AclPermissionType as Perm,
  AclResourceType as Res,
  ApiVersionsApi,
  ApiKey,
  ConsumerGroupDescribeApi,
  ConsumerGroupHeartbeatApi,
  DescribeAclsApi,
  DescribeUserScramCredentialsApi,
  DescribeLogDirsApi,
  DescribeTransactionsApi,
  InitProducerIdApi,
  ListTransactionsApi,
  DescribeClusterApi,
  DescribeGroupsApi,
  FetchApi,
  JoinGroupApi,
  KafkaErrorCode as E,
  ListGroupsApi,
  MetadataApi,
  ProduceApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
  type FetchRequest,
  type ProduceRequest,
} from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger, metadataRequest as md } from './helpers.js';

const produce = (topic: string, records: Buffer): ProduceRequest => ({
  transactionalId: null,
  acks: -1,
  timeoutMs: 5000,
  topics: [{ name: topic, partitions: [{ index: 0, records }] }],
});
const fetchReq = (topic: string): FetchRequest => ({
  replicaId: -1,
  maxWaitMs: 0,
  minBytes: 1,
  maxBytes: 1 << 20,
  isolationLevel: 0,
  sessionId: 0,
  sessionEpoch: -1,
  topics: [
    { topic, partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }] },
  ],
  forgottenTopics: [],
  rackId: '',
  clusterId: null,
});
const batch = (n: number, size = 10) =>
  encodeBatch(Array.from({ length: n }, (_, i) => ({ key: null, value: Buffer.alloc(size, i), headers: [], timestamp: Date.now() })));
const plainToken = (user: string, pw: string) => Buffer.from(`\0${user}\0${pw}`, 'utf8');

/** An external authenticator that knows one user (what the webhook authenticator answers). */
const external: ExternalAuthenticator = {
  async check(username, password) {
    return username === 'ext' && String(password) === 'ext-pw' ? { verdict: 'ok', groups: ['ext-group'], namespace: 'default' } : { verdict: 'bad' };
  },
};

describe('kafka access control', () => {
  let engine: Engine;
  let directory: Directory;
  let guard: PasswordGuard;
  let access: AccessControl;
  let listener: ProtocolListener;
  let closed: ProtocolListener;
  const log = captureLogger();

  before(async () => {
    const m = new MemoryStreams();
    engine = new Engine(m, m);
    await engine.load();
    directory = await Directory.open({ store: new MemoryControlStore(), hasher: (p) => guard.verifier.hash(p) });
    guard = new PasswordGuard(directory);
    access = new AccessControl({ directory, guard, anonymous: new Set(['kafka']), external });
    await directory.addUser({ username: 'alice', password: 'alice-pw' });
    const ctx = { engine, logger: log.logger, brokerId: 1 };
    const sasl = accessSaslProvider(access, ['PLAIN', 'SCRAM-SHA-256']);
    listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, createKafkaAdapter(ctx, { sasl, access }));
    closed = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, createKafkaAdapter(ctx, { sasl, access, anonymous: false }));
    for (const name of ['pub.a', 'pub.b', 'hidden']) await engine.createStream({ name, partitions: 1 });
  });
  after(async () => {
    await listener.close();
    await closed.close();
    access.close();
    await guard.close();
  });
  beforeEach(async () => {
    for (const p of directory.policies.defs()) await directory.deletePolicy(p.name);
    for (const n of directory.listNamespaces()) if (n.name !== 'default') await directory.deleteNamespace(n.name);
    await directory.putNamespace({ name: 'default', quotas: {} });
  });

  it('with no policy (default auto) an anonymous client may do everything; once one exists, the rest is denied', async () => {
    const c = await RawClient.connect(listener.address().port);
    try {
      assert.deepEqual((await c.call(MetadataApi, 9, md(null))).topics.map((t) => t.name).sort(), ['hidden', 'pub.a', 'pub.b']);
      await directory.putPolicy({
        name: 'read-pub',
        effect: 'allow',
        actions: ['describe', 'subscribe'],
        resources: ['stream:pub.*'],
        principals: ['everyone'],
      });
      // The same connection, the next request: filtered, and an explicit request for a hidden topic is refused.
      assert.deepEqual((await c.call(MetadataApi, 9, md(null))).topics.map((t) => t.name).sort(), ['pub.a', 'pub.b']);
      const m = await c.call(MetadataApi, 9, md(['hidden', 'pub.a', 'pub.new']));
      assert.deepEqual(
        m.topics.map((t) => [t.name, t.errorCode]),
        [
          ['hidden', E.TOPIC_AUTHORIZATION_FAILED],
          ['pub.a', E.NONE],
          // Would be auto-created, but the client may not create topics.
          ['pub.new', E.TOPIC_AUTHORIZATION_FAILED],
        ],
      );
      assert.equal(engine.getStream('pub.new'), undefined);
      const p = await c.call(ProduceApi, 7, produce('pub.a', batch(1)));
      assert.equal(p.topics[0].partitions[0].errorCode, E.TOPIC_AUTHORIZATION_FAILED);
      assert.equal(engine.offsets('pub.a', 0).highWatermark, 0);
      const f = await c.call(FetchApi, 11, fetchReq('hidden'));
      assert.equal(f.responses[0].partitions[0].errorCode, E.TOPIC_AUTHORIZATION_FAILED);
      assert.equal((await c.call(FetchApi, 11, fetchReq('pub.a'))).responses[0].partitions[0].errorCode, E.NONE);
      const cl = await c.call(DescribeClusterApi, 1, { includeClusterAuthorizedOperations: false, endpointType: 1 });
      assert.equal(cl.errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
      const j = await c.call(JoinGroupApi, 5, {
        groupId: 'g',
        sessionTimeoutMs: 10_000,
        rebalanceTimeoutMs: 10_000,
        memberId: '',
        groupInstanceId: null,
        protocolType: 'consumer',
        protocols: [{ name: 'range', metadata: Buffer.alloc(0) }],
        reason: null,
      });
      assert.equal(j.errorCode, E.GROUP_AUTHORIZATION_FAILED);
      const dg = await c.call(DescribeGroupsApi, 5, { groups: ['g'], includeAuthorizedOperations: false });
      assert.equal(dg.groups[0].errorCode, E.GROUP_AUTHORIZATION_FAILED);
      const acls = await c.call(DescribeAclsApi, 1, {
        resourceTypeFilter: Res.ANY,
        resourceNameFilter: null,
        patternTypeFilter: Pat.ANY,
        principalFilter: null,
        hostFilter: null,
        operation: Op.ANY,
        permissionType: Perm.ANY,
      });
      assert.equal(acls.errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
      assert.equal(await c.closesWithin(50), false, 'refusals keep the connection open');
    } finally {
      c.close();
    }
  });

  it('ListGroups leaves out groups the client may not describe', async () => {
    await engine.store.commitOffsets('seen-g', [{ stream: 'pub.a', partition: 0, offset: 0, metadata: null }]);
    await engine.store.commitOffsets('other-g', [{ stream: 'pub.a', partition: 0, offset: 0, metadata: null }]);
    await directory.putPolicy({ name: 'g', effect: 'allow', actions: ['describe'], resources: ['group:seen-*'], principals: ['everyone'] });
    const c = await RawClient.connect(listener.address().port);
    try {
      const l = await c.call(ListGroupsApi, 4, { statesFilter: [], typesFilter: [] });
      assert.deepEqual(
        l.groups.map((g) => g.groupId),
        ['seen-g'],
      );
    } finally {
      c.close();
    }
  });

  it('ConsumerGroupHeartbeat needs the group and every named topic; a regex brings in only topics the client may describe', async () => {
    await directory.putPolicy({
      name: 'cg',
      effect: 'allow',
      actions: ['subscribe', 'describe'],
      resources: ['group:cg-*', 'stream:pub.*'],
      principals: ['everyone'],
    });
    const c = await RawClient.connect(listener.address().port);
    const join = (groupId: string, names: string[] | null, regex: string | null) =>
      c.call(ConsumerGroupHeartbeatApi, 1, {
        groupId,
        memberId: `m-${groupId}`,
        memberEpoch: 0,
        instanceId: null,
        rackId: null,
        rebalanceTimeoutMs: 5000,
        subscribedTopicNames: names,
        subscribedTopicRegex: regex,
        serverAssignor: null,
        topicPartitions: [],
      });
    try {
      assert.equal((await join('other', ['pub.a'], null)).errorCode, E.GROUP_AUTHORIZATION_FAILED);
      assert.equal((await join('cg-1', ['pub.a', 'hidden'], null)).errorCode, E.TOPIC_AUTHORIZATION_FAILED);
      const byRegex = await join('cg-2', [], '.*');
      assert.equal(byRegex.errorCode, E.NONE);
      const ids = (byRegex.assignment?.topicPartitions ?? []).map((t) => engine.getStreamById(t.topicId.toString('hex'))?.def.name).sort();
      assert.deepEqual(ids, ['pub.a', 'pub.b'], 'hidden is left out');
      const d = await c.call(ConsumerGroupDescribeApi, 1, { groupIds: ['cg-2', 'other'], includeAuthorizedOperations: false });
      assert.deepEqual(
        d.groups.map((g) => g.errorCode),
        [E.NONE, E.GROUP_AUTHORIZATION_FAILED],
      );
    } finally {
      c.close();
    }
  });

  it('namespaces: a tenant lists and reads only its own topics (by name and by id); default cannot spell them; the transaction listings and log dirs are its own', async () => {
    await directory.putNamespace({ name: 'ten', quotas: {} });
    if (directory.lookup('tina') === undefined) await directory.addUser({ username: 'tina', password: 'tina-pw', namespace: 'ten' });
    const own = await engine.createStream({ name: 'ten~orders', partitions: 1, namespaced: true });
    try {
      const t = await RawClient.connect(listener.address().port);
      try {
        await t.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
        assert.equal((await t.call(SaslAuthenticateApi, 2, { authBytes: plainToken('tina', 'tina-pw') })).errorCode, E.NONE);
        // Metadata of every topic (v12, with topic ids): the namespace's one, under the name its clients write.
        const all = await t.call(MetadataApi, 12, md(null));
        assert.deepEqual(
          all.topics.map((x) => x.name),
          ['orders'],
        );
        assert.equal(all.topics[0].topicId.toString('hex'), own.id);
        // Fetch v13 by topic id: its own topic is read; default's pub.a is an unknown id.
        const byId = (id: Buffer): FetchRequest => ({ ...fetchReq(''), topics: [{ ...fetchReq('').topics[0], topic: '', topicId: id }] });
        const mine = await t.call(FetchApi, 13, byId(Buffer.from(own.id!, 'hex')));
        assert.equal(mine.responses[0].partitions[0].errorCode, E.NONE);
        const theirs = await t.call(FetchApi, 13, byId(Buffer.from(engine.getStream('pub.a')!.def.id!, 'hex')));
        assert.equal(theirs.responses[0].partitions[0].errorCode, E.UNKNOWN_TOPIC_ID);
        // By name, default's pub.a does not exist here (auto-creation makes the tenant's own).
        const m = await t.call(MetadataApi, 9, { ...md(['pub.a']), allowAutoTopicCreation: false });
        assert.deepEqual(
          m.topics.map((x) => [x.name, x.errorCode]),
          [['pub.a', E.UNKNOWN_TOPIC_OR_PARTITION]],
        );
        // A transactional id of the tenant's is listed and described under the name it wrote; default's are not listed.
        const init = await t.call(InitProducerIdApi, 4, { transactionalId: 'tx1', transactionTimeoutMs: 60000, producerId: -1, producerEpoch: -1 });
        assert.equal(init.errorCode, E.NONE);
        const listed = await t.call(ListTransactionsApi, 1, { stateFilters: [], producerIdFilters: [], durationFilter: -1 });
        assert.deepEqual(
          listed.transactionStates.map((x) => x.transactionalId),
          ['tx1'],
        );
        const described = await t.call(DescribeTransactionsApi, 0, { transactionalIds: ['tx1'] });
        assert.deepEqual(
          described.transactionStates.map((x) => [x.transactionalId, x.errorCode, x.transactionState]),
          [['tx1', E.NONE, 'Empty']],
        );
        // The SCRAM and quota APIs need the cluster, which the default never grants a tenant.
        const scram = await t.call(DescribeUserScramCredentialsApi, 0, { users: null });
        assert.equal(scram.errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
        assert.deepEqual(scram.results, []);
        // DescribeLogDirs answers the tenant with its own topics only, under the names it writes.
        const dirs = await t.call(DescribeLogDirsApi, 4, { topics: null });
        assert.equal(dirs.errorCode, E.NONE);
        assert.deepEqual(
          dirs.results.map((r) => r.topics.map((x) => x.name)),
          [['orders']],
        );
      } finally {
        t.close();
      }
      const d = await RawClient.connect(listener.address().port);
      try {
        assert.ok(!(await d.call(MetadataApi, 9, md(null))).topics.some((x) => x.name!.includes('~')), 'default lists no tenant topic');
        const txns = await d.call(ListTransactionsApi, 1, { stateFilters: [], producerIdFilters: [], durationFilter: -1 });
        assert.ok(!txns.transactionStates.some((x) => x.transactionalId.includes('tx1')), 'default lists no tenant transactional id');
        const m = await d.call(MetadataApi, 9, md(['ten~orders']));
        assert.deepEqual(
          m.topics.map((x) => [x.name, x.errorCode]),
          [['ten~orders', E.INVALID_TOPIC_EXCEPTION]],
        );
        const p = await d.call(ProduceApi, 7, produce('ten~orders', batch(1)));
        assert.equal(p.topics[0].partitions[0].errorCode, E.INVALID_TOPIC_EXCEPTION);
        assert.equal(engine.offsets('ten~orders', 0).highWatermark, 0);
      } finally {
        d.close();
      }
    } finally {
      await engine.deleteStream('ten~orders');
      await directory.deleteUser('tina');
    }
  });

  it('PLAIN goes through access.password: a directory user and a user of the external authenticator get their principal', async () => {
    await directory.putPolicy({ name: 'ext', effect: 'allow', actions: ['describe'], resources: ['stream:hidden'], principals: ['group:ext-group'] });
    for (const [user, pw, sees] of [
      ['alice', 'alice-pw', []],
      ['ext', 'ext-pw', ['hidden']],
    ] as const) {
      const c = await RawClient.connect(listener.address().port);
      try {
        await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
        const a = await c.call(SaslAuthenticateApi, 2, { authBytes: plainToken(user, pw) });
        assert.equal(a.errorCode, E.NONE, user);
        assert.deepEqual(
          (await c.call(MetadataApi, 9, md(null))).topics.map((t) => t.name),
          sees,
          user,
        );
        const entry = access.clients.list().find((e) => e.user === user);
        assert.ok(entry, `${user} registered with its user`);
      } finally {
        c.close();
      }
    }
    const bad = await RawClient.connect(listener.address().port);
    await bad.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    assert.equal((await bad.call(SaslAuthenticateApi, 2, { authBytes: plainToken('ext', 'nope') })).errorCode, E.SASL_AUTHENTICATION_FAILED);
    bad.close();
  });

  it('answers Produce and Fetch over the namespace rates with throttle_time_ms (KIP-219), counted in the quota figures', async () => {
    await directory.putNamespace({ name: 'default', quotas: { publishRate: 5, bytesOutRate: 100 } });
    const c = await RawClient.connect(listener.address().port);
    try {
      const before = access.quotas.figures().default?.throttled ?? 0;
      const p = await c.call(ProduceApi, 7, produce('pub.b', batch(6)));
      assert.equal(p.topics[0].partitions[0].errorCode, E.NONE);
      assert.ok(p.throttleTimeMs > 0, `produce throttled ${p.throttleTimeMs} ms`);
      // The connection is muted, not closed: the next request is answered once the time has passed.
      const f = await c.call(FetchApi, 11, fetchReq('pub.b'));
      assert.equal(f.responses[0].partitions[0].errorCode, E.NONE);
      assert.ok(f.throttleTimeMs > 0, `fetch throttled ${f.throttleTimeMs} ms`);
      assert.ok((access.quotas.figures().default?.throttled ?? 0) >= before + 2);
      const entry = access.clients.list().find((e) => e.reg.protocol === 'kafka' && e.messagesIn === 6);
      assert.equal(entry?.messagesOut, 6);
    } finally {
      c.close();
    }
  });

  it('closes an unauthenticated client at its first request when anonymous Kafka clients are not allowed', async () => {
    const c = await RawClient.connect(closed.address().port);
    const av = await c.call(ApiVersionsApi, 3, { clientSoftwareName: 'raw', clientSoftwareVersion: '1' });
    assert.ok(
      av.apiKeys.some((k) => k.apiKey === ApiKey.DescribeAcls),
      'the ACL APIs are advertised',
    );
    c.send(c.frame(MetadataApi, 9, md(null)));
    assert.equal(await c.closesWithin(2000), true);
    assert.ok(log.entries('anonymous Kafka clients are not allowed').length >= 1);
  });

  it('answers the ACL APIs with SECURITY_DISABLED without access control', async () => {
    const m = new MemoryStreams();
    const bare = await startKafkaListener({ engine: new Engine(m, m), logger: log.logger, brokerId: 1 }, { host: '127.0.0.1', port: 0 });
    const c = await RawClient.connect(bare.address().port);
    try {
      const r = await c.call(DescribeAclsApi, 1, {
        resourceTypeFilter: Res.ANY,
        resourceNameFilter: null,
        patternTypeFilter: Pat.ANY,
        principalFilter: null,
        hostFilter: null,
        operation: Op.ANY,
        permissionType: Perm.ANY,
      });
      assert.equal(r.errorCode, E.SECURITY_DISABLED);
    } finally {
      c.close();
      await bare.close();
    }
  });
});

describe('kafka ACL ↔ policy mapping', () => {
  const acl = {
    resourceType: Res.TOPIC,
    resourceName: 'orders',
    patternType: Pat.LITERAL,
    principal: 'User:alice',
    host: '*',
    operation: Op.READ,
    permissionType: Perm.ALLOW,
  };

  it('maps one binding to one policy and back, with a stable name', () => {
    const p = bindingPolicy(acl);
    assert.deepEqual([p.effect, p.actions, p.resources, p.principals, p.source], ['allow', ['subscribe'], ['stream:orders'], ['user:alice'], 'kafka-acl']);
    assert.match(p.name, /^kafka-acl-[0-9a-f]{16}$/);
    assert.equal(bindingPolicy(acl).name, p.name, 'the same ACL is the same policy');
    assert.deepEqual(policyBindings({ ...p, createdAt: 0 }), [acl]);
    const prefixed = bindingPolicy({
      ...acl,
      resourceType: Res.GROUP,
      resourceName: 'g-',
      patternType: Pat.PREFIXED,
      principal: 'User:*',
      operation: Op.ALL,
      permissionType: Perm.DENY,
    });
    assert.deepEqual([prefixed.effect, prefixed.actions, prefixed.resources, prefixed.principals], ['deny', ['*'], ['group:g-*'], ['everyone']]);
    const cluster = bindingPolicy({ ...acl, resourceType: Res.CLUSTER, resourceName: 'kafka-cluster', operation: Op.ALTER });
    assert.deepEqual(cluster.resources, ['cluster:*']);
    assert.equal(bindingPolicy({ ...acl, operation: Op.IDEMPOTENT_WRITE }).actions[0], 'publish');
    // Kafka's TRANSACTIONAL_ID resource: literal and prefixed, both ways.
    const txn = { ...acl, resourceType: Res.TRANSACTIONAL_ID, resourceName: 'etl-', patternType: Pat.PREFIXED, operation: Op.WRITE };
    const tp = bindingPolicy(txn);
    assert.deepEqual([tp.actions, tp.resources], [['publish'], ['transactional-id:etl-*']]);
    assert.deepEqual(policyBindings({ ...tp, createdAt: 0 }), [txn]);
    const lit = { ...acl, resourceType: Res.TRANSACTIONAL_ID, resourceName: 'etl-1', operation: Op.DESCRIBE };
    assert.deepEqual(bindingPolicy(lit).resources, ['transactional-id:etl-1']);
    assert.deepEqual(policyBindings({ ...bindingPolicy(lit), createdAt: 0 }), [lit]);
  });

  it('refuses what does not map', () => {
    for (const bad of [
      { ...acl, host: '10.0.0.1' },
      { ...acl, principal: 'alice' },
      { ...acl, resourceType: Res.DELEGATION_TOKEN },
      { ...acl, operation: Op.CLUSTER_ACTION },
      { ...acl, resourceType: Res.CLUSTER, resourceName: 'other' },
      { ...acl, patternType: Pat.MATCH },
      { ...acl, resourceName: 'a*b' },
    ]) {
      assert.throws(() => bindingPolicy(bad), JSON.stringify(bad));
    }
  });

  it('lists a policy made elsewhere as one ACL per principal × resource × action, leaving out what Kafka has no word for', () => {
    const bindings = policyBindings({
      name: 'p',
      effect: 'allow',
      actions: ['publish', 'admin'],
      resources: ['stream:a', 'topic:x/#', 'group:*'],
      principals: ['user:u', 'group:ops'],
      createdAt: 0,
    });
    assert.deepEqual(
      bindings.map((b) => `${b.principal} ${b.resourceType}:${b.resourceName}:${b.patternType} ${b.operation}`),
      ['User:u 2:a:3 4', 'User:u 3:*:3 4', 'Group:ops 2:a:3 4', 'Group:ops 3:*:3 4'],
    );
  });

  it('filters: ANY, MATCH (literal, * and prefixes of the name), exact fields', () => {
    const any = {
      resourceTypeFilter: Res.ANY,
      resourceNameFilter: null,
      patternTypeFilter: Pat.ANY,
      principalFilter: null,
      hostFilter: null,
      operation: Op.ANY,
      permissionType: Perm.ANY,
    };
    assert.ok(filterMatches(any, acl));
    const match = { ...any, resourceNameFilter: 'orders-eu', patternTypeFilter: Pat.MATCH };
    assert.ok(filterMatches(match, { ...acl, resourceName: 'orders-', patternType: Pat.PREFIXED }));
    assert.ok(filterMatches(match, { ...acl, resourceName: '*' }));
    assert.ok(!filterMatches(match, acl));
    assert.ok(!filterMatches({ ...any, principalFilter: 'User:bob' }, acl));
    assert.ok(!filterMatches({ ...any, operation: Op.WRITE }, acl));
    assert.ok(!filterMatches({ ...any, patternTypeFilter: Pat.PREFIXED }, acl));
  });
});
