/**
 * The operations APIs under access control, at the byte level: DescribeClientQuotas / AlterClientQuotas 0-1 on
 * FlowMQ's user quotas (and their enforcement: throttle_time_ms), DescribeUserScramCredentials /
 * AlterUserScramCredentials 0 on the user directory (a SCRAM login with the new credential), Kafka's authorization
 * answers for every operations API, and runtime settings (quotas, broker configs) surviving a restart and reaching
 * another broker sharing the store.
 */
import assert from 'node:assert/strict';
import { pbkdf2Sync, randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import kafkajs from 'kafkajs';
import { Engine, encodeBatch } from '../../../src/core/index.js';
import { AccessControl, Directory, PasswordGuard, RuntimeSettings } from '../../../src/control/index.js';
import { MemoryControlStore } from '../../../src/storage/metastore/control-store.js';
import { accessSaslProvider } from '../../../src/protocols/kafka/auth.js';
import { createKafkaAdapter, startKafkaListener } from '../../../src/protocols/kafka/index.js';
import {
  AlterClientQuotasApi,
  AlterUserScramCredentialsApi,
  DescribeClientQuotasApi,
  DescribeConfigsApi,
  DescribeLogDirsApi,
  DescribeUserScramCredentialsApi,
  ElectLeadersApi,
  IncrementalAlterConfigsApi,
  KafkaErrorCode as E,
  OffsetDeleteApi,
  ProduceApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
} from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger } from './helpers.js';

const { Kafka, logLevel } = kafkajs;

const plainToken = (user: string, pw: string) => Buffer.from(`\0${user}\0${pw}`, 'utf8');
const user = (name: string | null) => [{ entityType: 'user', entityName: name }];

describe('kafka operations APIs under access control', () => {
  const store = new MemoryControlStore();
  let engine: Engine;
  let directory: Directory;
  let guard: PasswordGuard;
  let access: AccessControl;
  let listener: ProtocolListener;
  const log = captureLogger();

  /** A connection logged in with SASL PLAIN. */
  async function login(name: string, pw: string): Promise<RawClient> {
    const c = await RawClient.connect(listener.address().port);
    await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    const a = await c.call(SaslAuthenticateApi, 2, { authBytes: plainToken(name, pw) });
    assert.equal(a.errorCode, E.NONE, a.errorMessage ?? '');
    return c;
  }

  before(async () => {
    const m = new MemoryStreams();
    engine = new Engine(m, m);
    await engine.load();
    directory = await Directory.open({ store, hasher: (p) => guard.verifier.hash(p) });
    guard = new PasswordGuard(directory);
    const settings = await RuntimeSettings.open(store, directory);
    access = new AccessControl({ directory, guard, anonymous: new Set(), settings });
    await directory.addUser({ username: 'admin', password: 'admin-pw' });
    await directory.addUser({ username: 'alice', password: 'alice-pw' });
    await directory.putPolicy({
      name: 'admin',
      effect: 'allow',
      actions: ['*'],
      resources: ['cluster:*', 'stream:*', 'group:*', 'topic:#'],
      principals: ['user:admin'],
    });
    await directory.putPolicy({
      name: 'alice',
      effect: 'allow',
      actions: ['describe', 'subscribe', 'publish'],
      resources: ['stream:*', 'topic:#'],
      principals: ['user:alice'],
    });
    const ctx = { engine, logger: log.logger, brokerId: 0 };
    const sasl = accessSaslProvider(access, ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512']);
    listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, createKafkaAdapter(ctx, { sasl, access, anonymous: false }));
    await engine.createStream({ name: 'acc.t', partitions: 1 });
  });
  after(async () => {
    await listener.close();
    access.close();
    await guard.close();
  });

  it('refuses every operations API to a user without the cluster (or group) rights, as Kafka', async () => {
    const c = await login('alice', 'alice-pw');
    try {
      const ld = await c.call(DescribeLogDirsApi, 4, { topics: null });
      assert.deepEqual([ld.errorCode, ld.results], [E.CLUSTER_AUTHORIZATION_FAILED, []]);
      const el = await c.call(ElectLeadersApi, 2, { electionType: 0, topicPartitions: [{ topic: 'acc.t', partitions: [0] }], timeoutMs: 1000 });
      assert.deepEqual(
        [el.errorCode, el.replicaElectionResults[0].partitionResult[0].errorCode],
        [E.CLUSTER_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED],
      );
      const od = await c.call(OffsetDeleteApi, 0, { groupId: 'g', topics: [{ name: 'acc.t', partitions: [{ partitionIndex: 0 }] }] });
      assert.equal(od.errorCode, E.GROUP_AUTHORIZATION_FAILED);
      const dq = await c.call(DescribeClientQuotasApi, 1, { components: [], strict: false });
      assert.deepEqual([dq.errorCode, dq.entries], [E.CLUSTER_AUTHORIZATION_FAILED, null]);
      const aq = await c.call(AlterClientQuotasApi, 1, {
        entries: [{ entity: user('alice'), ops: [{ key: 'producer_byte_rate', value: 1e6, remove: false }] }],
        validateOnly: false,
      });
      assert.equal(aq.entries[0].errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
      const ds = await c.call(DescribeUserScramCredentialsApi, 0, { users: null });
      assert.equal(ds.errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
      const as = await c.call(AlterUserScramCredentialsApi, 0, { deletions: [{ name: 'admin', mechanism: 1 }], upsertions: [] });
      assert.deepEqual(
        as.results.map((r) => [r.user, r.errorCode]),
        [['admin', E.CLUSTER_AUTHORIZATION_FAILED]],
      );
      const bc = await c.call(DescribeConfigsApi, 4, {
        resources: [{ resourceType: 4, resourceName: '0', configurationKeys: null }],
        includeSynonyms: false,
        includeDocumentation: false,
      });
      assert.equal(bc.results[0].errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
      const ba = await c.call(IncrementalAlterConfigsApi, 1, {
        resources: [{ resourceType: 4, resourceName: '', configs: [{ name: 'log.retention.ms', configOperation: 0, value: '1000' }] }],
        validateOnly: false,
      });
      assert.equal(ba.responses[0].errorCode, E.CLUSTER_AUTHORIZATION_FAILED);
      assert.equal(engine.streamDefaults.retentionMs, null);
    } finally {
      c.close();
    }
  });

  it('client quotas v0-v1: user and default-user byte rates set, described, enforced; the rest refused per entry', async () => {
    const c = await login('admin', 'admin-pw');
    try {
      for (const v of [0, 1]) {
        const validate = await c.call(AlterClientQuotasApi, v, {
          entries: [{ entity: user('alice'), ops: [{ key: 'producer_byte_rate', value: 1000, remove: false }] }],
          validateOnly: true,
        });
        assert.equal(validate.entries[0].errorCode, E.NONE);
        assert.deepEqual(access.settings.listQuotas(), [], `v${v}: validate only stores nothing`);
      }
      const r = await c.call(AlterClientQuotasApi, 1, {
        entries: [
          {
            entity: user('alice'),
            ops: [
              { key: 'producer_byte_rate', value: 1000, remove: false },
              { key: 'consumer_byte_rate', value: 5e6, remove: false },
            ],
          },
          { entity: user(null), ops: [{ key: 'consumer_byte_rate', value: 2e6, remove: false }] },
          { entity: [{ entityType: 'client-id', entityName: 'app' }], ops: [{ key: 'producer_byte_rate', value: 1000, remove: false }] },
          { entity: [...user('bob'), { entityType: 'client-id', entityName: 'app' }], ops: [{ key: 'producer_byte_rate', value: 1000, remove: false }] },
          { entity: [{ entityType: 'ip', entityName: '10.0.0.1' }], ops: [{ key: 'connection_creation_rate', value: 5, remove: false }] },
          { entity: user('carol'), ops: [{ key: 'request_percentage', value: 50, remove: false }] },
          { entity: user('dave'), ops: [{ key: 'connection_creation_rate', value: 5, remove: false }] },
          { entity: user('erin'), ops: [{ key: 'producer_byte_rate', value: 0, remove: false }] },
          { entity: user('frank'), ops: [{ key: 'producer_byte_rate', value: 10.5, remove: false }] },
          { entity: [], ops: [] },
          { entity: [{ entityType: 'tenant', entityName: 'x' }], ops: [] },
          { entity: user(''), ops: [] },
          {
            entity: user('gina'),
            ops: [
              { key: 'producer_byte_rate', value: 1, remove: false },
              { key: 'producer_byte_rate', value: 2, remove: false },
            ],
          },
        ],
        validateOnly: false,
      });
      assert.deepEqual(
        r.entries.map((e) => e.errorCode),
        [E.NONE, E.NONE, ...Array(11).fill(E.INVALID_REQUEST)],
      );
      for (const e of r.entries.slice(2)) assert.ok((e.errorMessage ?? '').length > 0, JSON.stringify(e));
      assert.match(r.entries[2].errorMessage ?? '', /per user/);
      assert.match(r.entries[5].errorMessage ?? '', /request_percentage/);
      // Described: every entity, exact names, the default, strict filters.
      const all = await c.call(DescribeClientQuotasApi, 0, { components: [], strict: false });
      const norm = (entries: typeof all.entries) =>
        (entries ?? [])
          .map((e) => [e.entity.map((x) => `${x.entityType}=${x.entityName}`).join(','), Object.fromEntries(e.values.map((x) => [x.key, x.value]))])
          .sort();
      assert.deepEqual(norm(all.entries), [
        ['user=alice', { producer_byte_rate: 1000, consumer_byte_rate: 5e6 }],
        ['user=null', { consumer_byte_rate: 2e6 }],
      ]);
      const exact = await c.call(DescribeClientQuotasApi, 1, { components: [{ entityType: 'user', matchType: 0, match: 'alice' }], strict: true });
      assert.deepEqual(
        norm(exact.entries).map(([e]) => e),
        ['user=alice'],
      );
      const def = await c.call(DescribeClientQuotasApi, 1, { components: [{ entityType: 'user', matchType: 1, match: null }], strict: false });
      assert.deepEqual(
        norm(def.entries).map(([e]) => e),
        ['user=null'],
      );
      const bad = await c.call(DescribeClientQuotasApi, 1, { components: [{ entityType: 'user', matchType: 0, match: null }], strict: false });
      assert.deepEqual([bad.errorCode, bad.entries], [E.INVALID_REQUEST, null]);
      const unsupported = await c.call(DescribeClientQuotasApi, 1, { components: [{ entityType: 'tenant', matchType: 2, match: null }], strict: false });
      assert.equal(unsupported.errorCode, E.UNSUPPORTED_VERSION);
      // In force: alice's own keys, the default's for the others.
      assert.deepEqual(access.settings.userQuota('alice'), { producerByteRate: 1000, consumerByteRate: 5e6 });
      assert.deepEqual(access.settings.userQuota('zed'), { consumerByteRate: 2e6 });
    } finally {
      c.close();
    }
    // Enforced: alice producing 20 kB at 1000 B/s is held back (KIP-219 throttle time).
    const a = await login('alice', 'alice-pw');
    try {
      const b = encodeBatch([{ key: null, value: Buffer.alloc(20_000, 1), headers: [], timestamp: Date.now() }]);
      const p = await a.call(ProduceApi, 8, {
        transactionalId: null,
        acks: -1,
        timeoutMs: 5000,
        topics: [{ name: 'acc.t', partitions: [{ index: 0, records: b }] }],
      });
      assert.equal(p.topics[0].partitions[0].errorCode, E.NONE);
      assert.ok(p.throttleTimeMs >= 10_000, `throttled ${p.throttleTimeMs} ms`);
    } finally {
      a.close();
    }
    // Removing the keys removes the entity.
    const c2 = await login('admin', 'admin-pw');
    try {
      const rm = await c2.call(AlterClientQuotasApi, 0, {
        entries: [
          {
            entity: user('alice'),
            ops: [
              { key: 'producer_byte_rate', value: 0, remove: true },
              { key: 'consumer_byte_rate', value: 0, remove: true },
            ],
          },
        ],
        validateOnly: false,
      });
      assert.equal(rm.entries[0].errorCode, E.NONE);
      assert.deepEqual(access.settings.userQuota('alice'), { consumerByteRate: 2e6 }, "back to the default user's");
    } finally {
      c2.close();
    }
  });

  it("SCRAM credentials: described, upserted from the client's salted password (a SCRAM login works), deleted", async () => {
    const c = await login('admin', 'admin-pw');
    const port = listener.address().port;
    try {
      const d = await c.call(DescribeUserScramCredentialsApi, 0, { users: [{ name: 'alice' }, { name: 'nobody' }, { name: 'admin' }, { name: 'admin' }] });
      assert.equal(d.errorCode, E.NONE);
      const byUser = new Map(d.results.map((r) => [r.user, r]));
      assert.deepEqual(
        byUser.get('alice')!.credentialInfos.map((x) => [x.mechanism, x.iterations]),
        [
          [1, 4096],
          [2, 4096],
        ],
      );
      assert.equal(byUser.get('nobody')!.errorCode, E.RESOURCE_NOT_FOUND);
      assert.equal(byUser.get('admin')!.errorCode, E.DUPLICATE_RESOURCE);
      const every = await c.call(DescribeUserScramCredentialsApi, 0, { users: null });
      assert.deepEqual(every.results.map((r) => r.user).sort(), ['admin', 'alice']);

      // What a Kafka admin client sends: a random salt, iterations, and Hi(password, salt, iterations).
      const salt = randomBytes(16);
      const salted = pbkdf2Sync('alice-new', salt, 8192, 32, 'sha256');
      const r = await c.call(AlterUserScramCredentialsApi, 0, {
        deletions: [
          { name: 'alice', mechanism: 2 },
          { name: 'nobody', mechanism: 1 },
          { name: 'dup', mechanism: 1 },
        ],
        upsertions: [
          { name: 'alice', mechanism: 1, iterations: 8192, salt, saltedPassword: salted },
          { name: 'ghost', mechanism: 1, iterations: 8192, salt, saltedPassword: salted },
          { name: 'dup', mechanism: 1, iterations: 8192, salt, saltedPassword: salted },
          { name: 'admin', mechanism: 1, iterations: 100, salt, saltedPassword: salted },
          { name: '', mechanism: 1, iterations: 8192, salt, saltedPassword: salted },
        ],
      });
      const res = new Map(r.results.map((x) => [x.user, x.errorCode]));
      // alice appears in a deletion and an upsertion: Kafka refuses a user altered twice in one request.
      assert.deepEqual(Object.fromEntries(res), {
        alice: E.DUPLICATE_RESOURCE,
        nobody: E.RESOURCE_NOT_FOUND,
        dup: E.DUPLICATE_RESOURCE,
        ghost: E.RESOURCE_NOT_FOUND,
        admin: E.UNACCEPTABLE_CREDENTIAL,
        '': E.UNACCEPTABLE_CREDENTIAL,
      });
      const ok = await c.call(AlterUserScramCredentialsApi, 0, {
        deletions: [],
        upsertions: [{ name: 'alice', mechanism: 1, iterations: 8192, salt, saltedPassword: salted }],
      });
      assert.deepEqual(ok.results, [{ user: 'alice', errorCode: E.NONE, errorMessage: null }]);
      const del = await c.call(AlterUserScramCredentialsApi, 0, { deletions: [{ name: 'alice', mechanism: 2 }], upsertions: [] });
      assert.equal(del.results[0].errorCode, E.NONE);
      const after = await c.call(DescribeUserScramCredentialsApi, 0, { users: [{ name: 'alice' }] });
      assert.deepEqual(
        after.results[0].credentialInfos.map((x) => [x.mechanism, x.iterations]),
        [[1, 8192]],
      );
      const badMech = await c.call(AlterUserScramCredentialsApi, 0, { deletions: [{ name: 'alice', mechanism: 9 }], upsertions: [] });
      assert.equal(badMech.results[0].errorCode, E.UNSUPPORTED_SASL_MECHANISM);
    } finally {
      c.close();
    }
    // A real client logs in with SCRAM-SHA-256 and the new password; the old one no longer works; SHA-512 is gone.
    const connect = async (mechanism: 'scram-sha-256' | 'scram-sha-512', password: string): Promise<boolean> => {
      const sasl = mechanism === 'scram-sha-256' ? { mechanism, username: 'alice', password } : { mechanism, username: 'alice', password };
      const admin = new Kafka({ brokers: [`127.0.0.1:${port}`], clientId: 'scram', logLevel: logLevel.NOTHING, retry: { retries: 0 }, sasl }).admin();
      try {
        await admin.connect();
        await admin.listTopics();
        return true;
      } catch {
        return false;
      } finally {
        await admin.disconnect().catch(() => undefined);
      }
    };
    assert.equal(await connect('scram-sha-256', 'alice-new'), true);
    assert.equal(await connect('scram-sha-256', 'alice-pw'), false);
    assert.equal(await connect('scram-sha-512', 'alice-pw'), false);
  });

  it('keeps runtime settings across a restart and shares them with another broker on the same store', async () => {
    const c = await login('admin', 'admin-pw');
    try {
      const r = await c.call(IncrementalAlterConfigsApi, 1, {
        resources: [{ resourceType: 4, resourceName: '', configs: [{ name: 'log.retention.hours', configOperation: 0, value: '48' }] }],
        validateOnly: false,
      });
      assert.equal(r.responses[0].errorCode, E.NONE, r.responses[0].errorMessage ?? '');
      assert.equal(engine.streamDefaults.retentionMs, 48 * 3_600_000);
    } finally {
      c.close();
    }
    // Another broker (or this one restarted) over the same control store.
    const m2 = new MemoryStreams();
    const engine2 = new Engine(m2, m2);
    await engine2.load();
    let guard2!: PasswordGuard;
    const directory2 = await Directory.open({ store, hasher: (p) => guard2.verifier.hash(p) });
    guard2 = new PasswordGuard(directory2);
    const settings2 = await RuntimeSettings.open(store, directory2);
    const access2 = new AccessControl({ directory: directory2, guard: guard2, anonymous: new Set(), settings: settings2 });
    const ctx2 = { engine: engine2, logger: log.logger, brokerId: 1 };
    const sasl2 = accessSaslProvider(access2, ['PLAIN']);
    const l2 = await startKafkaListener(ctx2, { host: '127.0.0.1', port: 0 }, {}, createKafkaAdapter(ctx2, { sasl: sasl2, access: access2, anonymous: false }));
    try {
      assert.equal(engine2.streamDefaults.retentionMs, 48 * 3_600_000, 'applied at start');
      assert.deepEqual(settings2.userQuota('zed'), { consumerByteRate: 2e6 }, 'quotas too');
      // A change made through the first broker reaches the second at its next reload (in a cluster: at once, on
      // the `control` notify; here by refreshing its directory).
      const c1 = await login('admin', 'admin-pw');
      try {
        const r = await c1.call(IncrementalAlterConfigsApi, 1, {
          resources: [
            {
              resourceType: 4,
              resourceName: '',
              configs: [
                { name: 'log.retention.hours', configOperation: 1, value: null },
                { name: 'log.retention.bytes', configOperation: 0, value: '5000000' },
              ],
            },
          ],
          validateOnly: false,
        });
        assert.equal(r.responses[0].errorCode, E.NONE);
      } finally {
        c1.close();
      }
      await directory2.refresh();
      await settings2.reload();
      assert.deepEqual([engine2.streamDefaults.retentionMs, engine2.streamDefaults.retentionBytes], [null, 5_000_000]);
      const c2 = await RawClient.connect(l2.address().port);
      try {
        await c2.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
        assert.equal((await c2.call(SaslAuthenticateApi, 2, { authBytes: plainToken('admin', 'admin-pw') })).errorCode, E.NONE);
        const d = await c2.call(DescribeConfigsApi, 4, {
          resources: [{ resourceType: 4, resourceName: '1', configurationKeys: ['log.retention.bytes'] }],
          includeSynonyms: false,
          includeDocumentation: false,
        });
        assert.deepEqual([d.results[0].configs[0].value, d.results[0].configs[0].configSource], ['5000000', 3]);
      } finally {
        c2.close();
      }
    } finally {
      await l2.close();
      access2.close();
      await guard2.close();
    }
  });
});
