/**
 * Authorization of Kafka transactional ids (Kafka's TRANSACTIONAL_ID resource) with unmodified clients, KafkaJS
 * 2.2.4 and Debian's confluent-kafka (librdkafka 2.0.2), against a broker with users started in this process:
 * without `publish transactional-id:<id>` a transactional producer fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
 * ACLs created (and deleted) with KafkaJS's admin client on TRANSACTIONAL_ID (prefixed, literal, a DENY) grant and
 * refuse it, as do policies naming `transactional-id:`, live on an open connection; the records still need WRITE on
 * their topic; and DescribeTransactions, ListTransactions and FindCoordinator answer only for ids the principal may
 * describe (checked with the test's raw client: KafkaJS has no admin call for them).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import kafkajsPkg, { type Kafka as KafkaT } from 'kafkajs';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import {
  DescribeTransactionsApi,
  FindCoordinatorApi,
  KafkaErrorCode as E,
  ListTransactionsApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
} from '../../src/protocols/kafka/codec/index.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { eventually, run } from './harness.js';

const { Kafka, logLevel, AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes } = kafkajsPkg;
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

/** librdkafka: init_transactions, then one committed transaction of one record; one JSON line. */
const LIBRDKAFKA_TXN = `
import json, sys
from confluent_kafka import KafkaException, Producer
b, user, pw, txid, topic = sys.argv[1:6]
p = Producer({'bootstrap.servers': b, 'security.protocol': 'SASL_PLAINTEXT', 'sasl.mechanisms': 'PLAIN',
              'sasl.username': user, 'sasl.password': pw, 'transactional.id': txid})
try:
    p.init_transactions(15)
except KafkaException as e:
    print(json.dumps({'init': e.args[0].name(), 'fatal': e.args[0].fatal()}))
    sys.exit(0)
p.begin_transaction()
p.produce(topic, b'from-librdkafka')
p.commit_transaction(15)
print(json.dumps({'init': 'ok', 'commit': 'ok'}))
`;

function kafka(addr: string, user: string, clientId = 'txn-acl-e2e'): KafkaT {
  return new Kafka({
    clientId,
    brokers: [addr],
    sasl: { mechanism: 'plain', username: user, password: `${user}-pw` },
    logLevel: logLevel.NOTHING,
    retry: { retries: 2, initialRetryTime: 100 },
    connectionTimeout: 5000,
  });
}

/** KafkaJS wraps protocol errors: the types and messages named anywhere in the chain. */
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
const denied = (e: unknown) => /TRANSACTIONAL_ID_AUTHORIZATION_FAILED/.test(kafkaErrorType(e));
/**
 * Without DESCRIBE on the id, FindCoordinator already answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED (as Kafka's
 * does): KafkaJS reports that as "Failed to find group coordinator", without the code (librdkafka names it).
 */
const noCoordinator = (e: unknown) => (e as Error).name === 'KafkaJSGroupCoordinatorNotFound';

describe('kafka transactional id authorization (KafkaJS, librdkafka)', () => {
  let dir = '';
  let broker: Broker;
  let addr = '';
  let port = 0;

  /** A KafkaJS transactional producer of `user` with `id` and its first transaction (InitProducerId done). */
  const txnProducer = async (user: string, id: string) => {
    const p = kafka(addr, user).producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 });
    try {
      await p.connect();
      return { p, t: await p.transaction() };
    } catch (err) {
      await p.disconnect();
      throw err;
    }
  };
  /** One committed transaction of `value` into `topic`. */
  const commitOne = async (user: string, id: string, topic: string, value: string) => {
    const { p, t } = await txnProducer(user, id);
    try {
      await t.send({ topic, messages: [{ value }] });
      await t.commit();
    } finally {
      await p.disconnect();
    }
  };
  const librdkafka = async (user: string, id: string, topic: string) => {
    const r = await run(PYTHON, ['-c', LIBRDKAFKA_TXN, addr, user, `${user}-pw`, id, topic], { timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout.trim().split('\n').pop()!) as { init: string; fatal?: boolean; commit?: string };
  };
  const login = async (user: string): Promise<RawClient> => {
    const c = await RawClient.connect(port);
    await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    const a = await c.call(SaslAuthenticateApi, 2, { authBytes: Buffer.from(`\0${user}\0${user}-pw`) });
    assert.equal(a.errorCode, E.NONE);
    return c;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-kafka-txn-acl-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: alice-pw\n- username: bob\n  password: bob-pw\n');
    const flags = {
      'data-dir': join(dir, 'data'),
      host: '127.0.0.1',
      protocols: 'kafka',
      'kafka-port': '0',
      'http-port': '0',
      'users-file': join(dir, 'users.yaml'),
      'kafka-group-initial-rebalance-delay': '0',
    };
    broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    port = broker.listeners.get('kafka')!.address().port;
    addr = `127.0.0.1:${port}`;
    const d = broker.access.directory;
    await d.addUser({ username: 'root', password: 'root-pw', groups: ['admins'] });
    await broker.engine.createStream({ name: 'txa.out', partitions: 1 });
    await broker.engine.createStream({ name: 'secret', partitions: 1 });
    // Both may produce to and read txa.*, and use groups g-*; no transactional id yet.
    await d.putPolicy({
      name: 'txa',
      effect: 'allow',
      actions: ['publish', 'subscribe', 'describe'],
      resources: ['stream:txa.*'],
      principals: ['user:alice', 'user:bob'],
    });
    await d.putPolicy({
      name: 'groups',
      effect: 'allow',
      actions: ['subscribe', 'describe'],
      resources: ['group:g-*'],
      principals: ['user:alice', 'user:bob'],
    });
  });
  after(async () => {
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a transactional id without the right: TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal (KafkaJS, librdkafka)', async () => {
    await assert.rejects(txnProducer('alice', 'etl-1'), noCoordinator);
    const r = await librdkafka('alice', 'etl-1', 'txa.out');
    assert.deepEqual(r, { init: 'TRANSACTIONAL_ID_AUTHORIZATION_FAILED', fatal: true });
    // An idempotent producer without transactional id needs no such right.
    const p = kafka(addr, 'alice').producer({ idempotent: true, maxInFlightRequests: 1 });
    await p.connect();
    await p.send({ topic: 'txa.out', messages: [{ value: 'idempotent' }] });
    await p.disconnect();
  });

  it('grants and refuses with ACLs on TRANSACTIONAL_ID made by KafkaJS admin (prefixed, literal, deny)', async () => {
    const root = kafka(addr, 'root').admin();
    await root.connect();
    try {
      const acl = {
        resourceType: AclResourceTypes.TRANSACTIONAL_ID,
        resourceName: 'etl-',
        resourcePatternType: ResourcePatternTypes.PREFIXED,
        principal: 'User:alice',
        host: '*',
        operation: AclOperationTypes.WRITE,
        permissionType: AclPermissionTypes.ALLOW,
      };
      await root.createAcls({
        acl: [
          acl,
          { ...acl, resourceName: 'solo', resourcePatternType: ResourcePatternTypes.LITERAL },
          { ...acl, resourceName: 'etl-9', resourcePatternType: ResourcePatternTypes.LITERAL, permissionType: AclPermissionTypes.DENY },
          { ...acl, resourceName: 'look', resourcePatternType: ResourcePatternTypes.LITERAL, operation: AclOperationTypes.DESCRIBE },
        ],
      });
      const made = broker.access.directory.policies
        .defs()
        .filter((p) => p.source === 'kafka-acl')
        .map((p) => `${p.effect} ${p.actions.join()} ${p.resources.join()} ${p.principals.join()}`)
        .sort();
      assert.deepEqual(made, [
        'allow describe transactional-id:look user:alice',
        'allow publish transactional-id:etl-* user:alice',
        'allow publish transactional-id:solo user:alice',
        'deny publish transactional-id:etl-9 user:alice',
      ]);
      const described = await root.describeAcls({
        resourceType: AclResourceTypes.TRANSACTIONAL_ID,
        resourcePatternType: ResourcePatternTypes.ANY,
        operation: AclOperationTypes.ANY,
        permissionType: AclPermissionTypes.ANY,
      });
      assert.deepEqual(
        described.resources.map((r) => `${r.resourcePatternType}:${r.resourceName}:${r.acls.map((a) => a.permissionType).join()}`).sort(),
        [
          `${ResourcePatternTypes.LITERAL}:etl-9:${AclPermissionTypes.DENY}`,
          `${ResourcePatternTypes.LITERAL}:look:${AclPermissionTypes.ALLOW}`,
          `${ResourcePatternTypes.LITERAL}:solo:${AclPermissionTypes.ALLOW}`,
          `${ResourcePatternTypes.PREFIXED}:etl-:${AclPermissionTypes.ALLOW}`,
        ].sort(),
      );
    } finally {
      await root.disconnect();
    }

    // The prefix: etl-1 commits one transaction and aborts one (KafkaJS), etl-2 commits one (librdkafka).
    const { p, t: t1 } = await txnProducer('alice', 'etl-1');
    try {
      await t1.send({ topic: 'txa.out', messages: [{ value: 'committed' }] });
      await t1.commit();
      const t2 = await p.transaction();
      await t2.send({ topic: 'txa.out', messages: [{ value: 'aborted' }] });
      await t2.abort();
    } finally {
      await p.disconnect();
    }
    assert.deepEqual(await librdkafka('alice', 'etl-2', 'txa.out'), { init: 'ok', commit: 'ok' });
    // The literal: solo, not solo-2; the DENY wins over the prefix; another prefix is not covered.
    await commitOne('alice', 'solo', 'txa.out', 'solo');
    for (const id of ['solo-2', 'etl-9', 'other-1']) await assert.rejects(txnProducer('alice', id), noCoordinator, id);
    assert.deepEqual(await librdkafka('alice', 'etl-9', 'txa.out'), { init: 'TRANSACTIONAL_ID_AUTHORIZATION_FAILED', fatal: true });
    // DESCRIBE alone finds the coordinator; InitProducerId, which needs WRITE, is refused with the code itself.
    await assert.rejects(txnProducer('alice', 'look'), denied);
    assert.deepEqual(await librdkafka('alice', 'look', 'txa.out'), { init: 'TRANSACTIONAL_ID_AUTHORIZATION_FAILED', fatal: true });
    // Another user has none of alice's ACLs.
    await assert.rejects(txnProducer('bob', 'etl-1'), noCoordinator);
    // DeleteAcls of the literal ACL: solo is refused again.
    const root2 = kafka(addr, 'root').admin();
    await root2.connect();
    try {
      const deleted = await root2.deleteAcls({
        filters: [
          {
            resourceType: AclResourceTypes.TRANSACTIONAL_ID,
            resourceName: 'solo',
            resourcePatternType: ResourcePatternTypes.LITERAL,
            principal: 'User:alice',
            host: '*',
            operation: AclOperationTypes.ANY,
            permissionType: AclPermissionTypes.ANY,
          },
        ],
      });
      assert.equal(deleted.filterResponses[0].matchingAcls.length, 1);
    } finally {
      await root2.disconnect();
    }
    await assert.rejects(txnProducer('alice', 'solo'), noCoordinator);

    // The records are still checked against the topic: WRITE on the id does not reach `secret`.
    const { p: q, t } = await txnProducer('alice', 'etl-3');
    try {
      await assert.rejects(t.send({ topic: 'secret', messages: [{ value: 'nope' }] }), (e: unknown) => /TOPIC_AUTHORIZATION_FAILED/.test(kafkaErrorType(e)));
      await t.abort().catch(() => undefined);
    } finally {
      await q.disconnect();
    }
    assert.equal(broker.engine.offsets('secret', 0).highWatermark, 0, 'nothing stored in secret');

    // A read_committed reader sees what the allowed transactions committed, not the aborted record.
    const c = kafka(addr, 'alice').consumer({ groupId: 'g-reader', readUncommitted: false, maxWaitTimeInMs: 100 });
    const values: string[] = [];
    await c.connect();
    try {
      await c.subscribe({ topic: 'txa.out', fromBeginning: true });
      await c.run({ eachMessage: async ({ message }) => void values.push(message.value?.toString() ?? '') });
      await eventually(() => values.includes('solo'), 20_000, JSON.stringify(values));
    } finally {
      await c.disconnect();
    }
    assert.deepEqual(values, ['idempotent', 'committed', 'from-librdkafka', 'solo']);
  });

  it('policies name transactional ids as `transactional-id:` (as groups are `group:`), applied live', async () => {
    const d = broker.access.directory;
    await d.putPolicy({ name: 'bob-pipes', effect: 'allow', actions: ['publish'], resources: ['transactional-id:pipe-*'], principals: ['user:bob'] });
    await commitOne('bob', 'pipe-a', 'txa.out', 'pipe');
    assert.deepEqual(await librdkafka('bob', 'pipe-b', 'txa.out'), { init: 'ok', commit: 'ok' });
    await assert.rejects(txnProducer('bob', 'etl-1'), noCoordinator);
    // Changed while bob's producer is connected: its next transaction is refused.
    const { p, t } = await txnProducer('bob', 'pipe-a');
    try {
      await t.send({ topic: 'txa.out', messages: [{ value: 'pipe-2' }] });
      await t.commit();
      // WRITE withdrawn, DESCRIBE left (the coordinator is still found): AddPartitionsToTxn is refused.
      await d.putPolicy({ name: 'bob-pipes', effect: 'allow', actions: ['describe'], resources: ['transactional-id:pipe-*'], principals: ['user:bob'] });
      const t2 = await p.transaction();
      await assert.rejects(t2.send({ topic: 'txa.out', messages: [{ value: 'late' }] }), denied);
    } finally {
      await p.disconnect();
    }
  });

  it('answers DescribeTransactions, ListTransactions and FindCoordinator only for ids the principal may describe', async () => {
    const alice = await login('alice');
    const root = await login('root');
    try {
      const d = await alice.call(DescribeTransactionsApi, 0, { transactionalIds: ['etl-1', 'pipe-a'] });
      assert.deepEqual(
        d.transactionStates.map((s) => [s.transactionalId, s.errorCode]),
        [
          ['etl-1', E.NONE],
          ['pipe-a', E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED],
        ],
      );
      const list = async (c: RawClient) =>
        (await c.call(ListTransactionsApi, 0, { stateFilters: [], producerIdFilters: [], durationFilter: -1 })).transactionStates.map((s) => s.transactionalId);
      // alice's WRITE implies DESCRIBE (etl-*); solo (its ACL deleted) and bob's ids are left out. root (admins)
      // sees all.
      assert.deepEqual(await list(alice), ['etl-1', 'etl-2', 'etl-3']);
      assert.deepEqual(await list(root), ['etl-1', 'etl-2', 'etl-3', 'pipe-a', 'pipe-b', 'solo']);
      const f = await alice.call(FindCoordinatorApi, 4, { key: '', keyType: 1, coordinatorKeys: ['etl-1', 'pipe-a'] });
      assert.deepEqual(
        f.coordinators.map((x) => x.errorCode),
        [E.NONE, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED],
      );
    } finally {
      alice.close();
      root.close();
    }
  });
});
