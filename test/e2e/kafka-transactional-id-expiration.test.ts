/**
 * transactional.id.expiration.ms (issue 27) on a single broker, on both metastores (SQLite embedded, PostgreSQL with
 * S3): a broker started with --kafka-transactional-id-expiration 2s reports it in DescribeConfigs (KafkaJS admin);
 * a transactional id (KafkaJS producer) with no transaction for that long leaves ListTransactions and
 * DescribeTransactions, and the metastore (it is not back after a restart, which loads every stored id); an id with a
 * transaction open for longer stays; the expired id is initialized afresh (a new producer id) when used again.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import type { Kafka as KafkaT } from 'kafkajs';
import { DescribeTransactionsApi, KafkaErrorCode as E, ListTransactionsApi } from '../../src/protocols/kafka/codec/index.js';
import { RawClient } from '../protocols/kafka/helpers.js';
import { FlowmqProcess, eventually } from './harness.js';
import { storageConfigs } from './storage-configs.js';

const { Kafka, logLevel, ConfigResourceTypes } = kafkajsPkg;

for (const cfg of storageConfigs())
  describe(`transactional.id.expiration.ms [${cfg.name}]`, () => {
    let broker: FlowmqProcess;
    let base: string[];
    const kafka = (): KafkaT =>
      new Kafka({ clientId: 'txn-expiry', brokers: [broker.kafka], logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 } });
    const listed = async (): Promise<string[]> => {
      const raw = await RawClient.connect(broker.ports.kafka);
      try {
        const l = await raw.call(ListTransactionsApi, 1, { stateFilters: [], producerIdFilters: [], durationFilter: -1 });
        return l.transactionStates.map((s) => s.transactionalId).sort();
      } finally {
        raw.close();
      }
    };
    const described = async (id: string) => {
      const raw = await RawClient.connect(broker.ports.kafka);
      try {
        return (await raw.call(DescribeTransactionsApi, 0, { transactionalIds: [id] })).transactionStates[0];
      } finally {
        raw.close();
      }
    };

    before(async () => {
      base = await cfg.brokerArgs();
      broker = await FlowmqProcess.start({ args: [...base, '--kafka-transactional-id-expiration', '2s'] });
      const admin = kafka().admin();
      await admin.connect();
      await admin.createTopics({ topics: [{ topic: 'exp.t', numPartitions: 1 }] });
      await admin.disconnect();
    });
    after(async () => {
      await broker?.stop();
    });

    it('DescribeConfigs shows the broker setting', async () => {
      const admin = kafka().admin();
      await admin.connect();
      try {
        const r = await admin.describeConfigs({
          resources: [{ type: ConfigResourceTypes.BROKER, name: '0', configNames: ['transactional.id.expiration.ms'] }],
          includeSynonyms: false,
        });
        const e = r.resources[0].configEntries.find((c) => c.configName === 'transactional.id.expiration.ms');
        assert.equal(e?.configValue, '2000');
        assert.equal(e?.isDefault, false);
      } finally {
        await admin.disconnect();
      }
    });

    it('an idle transactional id expires from the coordinator and the metastore; one with a transaction open stays', async () => {
      // exp-open: a transaction left open (its timeout, KafkaJS's 60 s, is far off), begun before exp-idle's.
      const open = kafka().producer({ transactionalId: 'exp-open', idempotent: true, maxInFlightRequests: 1 });
      await open.connect();
      const openTxn = await open.transaction();
      await openTxn.send({ topic: 'exp.t', messages: [{ value: 'open' }] });
      const idle = kafka().producer({ transactionalId: 'exp-idle', idempotent: true, maxInFlightRequests: 1 });
      await idle.connect();
      const t = await idle.transaction();
      await t.send({ topic: 'exp.t', messages: [{ value: 'idle' }] });
      await t.commit();
      await idle.disconnect();
      const first = await described('exp-idle');
      assert.equal(first.transactionState, 'CompleteCommit');
      assert.deepEqual(await listed(), ['exp-idle', 'exp-open']);

      await eventually(async () => !(await listed()).includes('exp-idle'), 15_000, 'exp-idle expires');
      assert.deepEqual(await listed(), ['exp-open'], 'the open transaction is not expired, though idle longer');
      assert.equal((await described('exp-idle')).errorCode, E.TRANSACTIONAL_ID_NOT_FOUND);
      assert.equal((await described('exp-open')).transactionState, 'Ongoing');
      await openTxn.abort();
      await open.disconnect();

      // A restart loads every stored id before it takes clients: exp-idle is gone from the metastore (restarted with
      // an expiration of an hour, so that a document still stored would be listed, not expired again).
      broker = await broker.restart([...base, '--kafka-transactional-id-expiration', '1h']);
      assert.ok((await listed()).includes('exp-open'), 'the other id is loaded');
      assert.ok(!(await listed()).includes('exp-idle'), 'not back after a restart');
      assert.equal((await described('exp-idle')).errorCode, E.TRANSACTIONAL_ID_NOT_FOUND);

      // Used again, it starts afresh with a new producer id.
      const again = kafka().producer({ transactionalId: 'exp-idle', idempotent: true, maxInFlightRequests: 1 });
      await again.connect();
      const t2 = await again.transaction();
      await t2.send({ topic: 'exp.t', messages: [{ value: 'again' }] });
      await t2.commit();
      await again.disconnect();
      const second = await described('exp-idle');
      assert.equal(second.transactionState, 'CompleteCommit');
      assert.notEqual(String(second.producerId), String(first.producerId), 'a new producer id');
    });
  });
