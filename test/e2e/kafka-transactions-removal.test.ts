/**
 * Kafka transaction state goes with its stream and its namespace (issue 29): KafkaJS 2.2.4 against an in-process
 * broker on the embedded metastore (SQLite), restarted on the same data directory to prove the metastore holds
 * nothing either.
 *
 * - A transaction of `tx-re` aborted on topic `tx.re`, the topic deleted and made again: the same transactional id
 *   (the same producer id, the next epoch) commits records at the offsets the aborted ones had; a read_committed
 *   consumer reads them all, before and after a restart (the deleted topic's aborted list would skip them).
 * - A namespace deleted with a transactional id of its clients: made again, DescribeTransactions of that id is
 *   TRANSACTIONAL_ID_NOT_FOUND, before and after a restart (FlowMQ's codec observes; KafkaJS has no such call).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Kafka, logLevel, type Kafka as KafkaT } from 'kafkajs';
import { pino } from 'pino';
import { startBroker, type Broker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';
import { DescribeTransactionsApi, KafkaErrorCode as E, SaslAuthenticateApi, SaslHandshakeApi } from '../../src/protocols/kafka/codec/index.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { eventually } from './harness.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('e2e: Kafka transaction state is deleted with its stream and its namespace', { timeout: 90_000 }, () => {
  let dir = '';
  let broker: Broker;
  let kafkaPort = 0;
  let adminApi = '';

  const start = async () => {
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
    kafkaPort = broker.listeners.get('kafka')!.address().port;
    adminApi = `http://127.0.0.1:${broker.ports().http}`;
  };
  const http = async (method: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Basic ${Buffer.from('root:root-pw').toString('base64')}` };
    if (method !== 'GET') headers['content-type'] = 'application/json';
    const r = await fetch(adminApi + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, json: (text === '' ? null : JSON.parse(text)) as Json };
  };
  const kafka = (user: string): KafkaT =>
    new Kafka({
      clientId: `txrm-${user}`,
      brokers: [`127.0.0.1:${kafkaPort}`],
      sasl: { mechanism: 'plain', username: user, password: `${user}-pw` },
      logLevel: logLevel.NOTHING,
      retry: { retries: 3, initialRetryTime: 100 },
    });
  /** Reads `topic` read_committed from the beginning (a new group) until `last` arrives; the values, in order. */
  const readCommitted = async (user: string, topic: string, last: string): Promise<string[]> => {
    const consumer = kafka(user).consumer({ groupId: `reader-${Math.random()}`, readUncommitted: false, maxWaitTimeInMs: 200 });
    const values: string[] = [];
    await consumer.connect();
    try {
      await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({ eachMessage: async ({ message }) => void values.push(message.value?.toString() ?? '') });
      await eventually(() => values.includes(last), 20_000, `${topic}: ${JSON.stringify(values)}`);
    } finally {
      await consumer.disconnect();
    }
    return values;
  };
  /** DescribeTransactions of one transactional id as `user`. */
  const described = async (user: string, id: string) => {
    const raw = await RawClient.connect(kafkaPort);
    try {
      await raw.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
      assert.equal((await raw.call(SaslAuthenticateApi, 2, { authBytes: Buffer.from(`\0${user}\0${user}-pw`) })).errorCode, E.NONE);
      return (await raw.call(DescribeTransactionsApi, 0, { transactionalIds: [id] })).transactionStates[0]!;
    } finally {
      raw.close();
    }
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-txn-removal-'));
    writeFileSync(join(dir, 'users.yaml'), ['users:', '  - {username: root, password: root-pw, groups: [admins]}', ''].join('\n'));
    await start();
  });
  after(async () => {
    await broker?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a topic made again under the same name has no aborted transaction of the deleted one', async () => {
    const k = kafka('root');
    const admin = k.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'tx.re', numPartitions: 2 }] });
    const first = k.producer({ transactionalId: 'tx-re', idempotent: true, maxInFlightRequests: 1 });
    await first.connect();
    const aborted = await first.transaction();
    await aborted.send({ topic: 'tx.re', messages: [0, 1, 2, 3, 4, 5].map((i) => ({ value: `aborted-${i}`, partition: i % 2 })) });
    await aborted.abort();
    await first.disconnect();
    const before = await described('root', 'tx-re');
    assert.equal(before.transactionState, 'CompleteAbort');

    await admin.deleteTopics({ topics: ['tx.re'] });
    await admin.createTopics({ topics: [{ topic: 'tx.re', numPartitions: 2 }] });
    await admin.disconnect();
    // The same transactional id: the same producer id (the next epoch), records at the offsets the aborted ones had.
    const second = k.producer({ transactionalId: 'tx-re', idempotent: true, maxInFlightRequests: 1 });
    await second.connect();
    assert.equal(String((await described('root', 'tx-re')).producerId), String(before.producerId), 'the same producer id');
    const committed = await second.transaction();
    await committed.send({ topic: 'tx.re', messages: [0, 1, 2, 3, 4, 5].map((i) => ({ value: `committed-${i}`, partition: i % 2 })) });
    await committed.commit();
    // The marker: committed after them, in both partitions.
    const marker = await second.transaction();
    await marker.send({ topic: 'tx.re', messages: [0, 1].map((p) => ({ value: `marker-${p}`, partition: p })) });
    await marker.commit();
    await second.disconnect();
    const expected = ['committed-0', 'committed-1', 'committed-2', 'committed-3', 'committed-4', 'committed-5', 'marker-0', 'marker-1'];
    const readAll = async () => {
      const seen = new Set<string>();
      // Both markers: read until the second partition's too.
      for (const v of await readCommitted('root', 'tx.re', 'marker-1')) seen.add(v);
      for (const v of await readCommitted('root', 'tx.re', 'marker-0')) seen.add(v);
      return [...seen].sort();
    };
    assert.deepEqual(await readAll(), expected);
    // The metastore keeps no aborted list of the deleted topic either.
    await broker.close();
    await start();
    assert.deepEqual(await readAll(), expected, 'after a restart');
  });

  test("a namespace made again under the same name has no transactional id of the deleted one's clients", async () => {
    assert.equal((await http('POST', '/api/v1/namespaces', { name: 't1' })).status, 201);
    assert.equal((await http('POST', '/api/v1/users', { username: 'ann', password: 'ann-pw', namespace: 't1' })).status, 201);
    const k = kafka('ann');
    const admin = k.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'orders', numPartitions: 1 }] });
    await admin.disconnect();
    const producer = k.producer({ transactionalId: 'tx-ns', idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const t = await producer.transaction();
    await t.send({ topic: 'orders', messages: [{ value: 'o1' }] });
    await t.commit();
    await producer.disconnect();
    assert.equal((await described('ann', 'tx-ns')).transactionState, 'CompleteCommit');
    // root's own id of the same name, in `default`, stays.
    const rootProducer = kafka('root').producer({ transactionalId: 'tx-ns', idempotent: true, maxInFlightRequests: 1 });
    await rootProducer.connect();
    const rt = await rootProducer.transaction();
    await rt.send({ topic: 'tx.re', messages: [{ value: 'root' }] });
    await rt.commit();
    await rootProducer.disconnect();
    assert.equal((await described('root', 'tx-ns')).transactionState, 'CompleteCommit');

    assert.equal((await http('DELETE', '/api/v1/users/ann')).status, 204);
    const del = await http('DELETE', '/api/v1/namespaces/t1');
    assert.equal(del.status, 204, JSON.stringify(del.json));
    assert.equal((await http('POST', '/api/v1/namespaces', { name: 't1' })).status, 201);
    assert.equal((await http('POST', '/api/v1/users', { username: 'ann', password: 'ann-pw', namespace: 't1' })).status, 201);
    assert.equal((await described('ann', 'tx-ns')).errorCode, E.TRANSACTIONAL_ID_NOT_FOUND);
    assert.equal((await described('root', 'tx-ns')).transactionState, 'CompleteCommit', "default's id stays");
    await broker.close();
    await start();
    assert.equal((await described('ann', 'tx-ns')).errorCode, E.TRANSACTIONAL_ID_NOT_FOUND, 'after a restart');
    assert.equal((await described('root', 'tx-ns')).transactionState, 'CompleteCommit', "default's id stays after a restart");
  });
});
