/**
 * Topic ids (KIP-516) at the protocol level, with a raw client over a broker whose stream definitions are in a SQLite
 * metastore: CreateTopics answers the id, Metadata reports it (v10+) and looks topics up by it (v12+), it survives a
 * broker restart, Produce v13 / Fetch v13+ / OffsetCommit v10 / OffsetFetch v10 / DeleteTopics v6 resolve it, and a
 * topic deleted and created again under its name gets a new id: the old one is UNKNOWN_TOPIC_ID everywhere, and a
 * fetch session that knew the topic by its old id answers INCONSISTENT_TOPIC_ID, as Kafka does.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Engine, encodeBatch } from '../../../src/core/index.js';
import { SqliteMetastore } from '../../../src/storage/metastore/index.js';
import { startKafkaListener } from '../../../src/protocols/kafka/index.js';
import {
  CreateTopicsApi,
  DeleteTopicsApi,
  FetchApi,
  KafkaErrorCode as E,
  MetadataApi,
  OffsetCommitApi,
  OffsetFetchApi,
  ProduceApi,
  ZERO_UUID,
  type FetchRequest,
  type Uuid,
} from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger, metadataRequest } from './helpers.js';

interface Broker {
  engine: Engine;
  store: SqliteMetastore;
  listener: ProtocolListener;
  port: number;
}

async function startBroker(file: string): Promise<Broker> {
  const store = SqliteMetastore.open(file);
  const m = new MemoryStreams();
  const engine = new Engine(m, store);
  await engine.load();
  const listener = await startKafkaListener({ engine, logger: captureLogger().logger, brokerId: 0 }, { host: '127.0.0.1', port: 0 }, {});
  return { engine, store, listener, port: listener.address().port };
}

async function stopBroker(b: Broker): Promise<void> {
  await b.listener.close();
  await b.store.close();
}

const fetchById = (topicId: Uuid, sessionId = 0, sessionEpoch = -1): FetchRequest => ({
  replicaId: -1,
  maxWaitMs: 0,
  minBytes: 0,
  maxBytes: 1 << 20,
  isolationLevel: 0,
  sessionId,
  sessionEpoch,
  topics:
    sessionEpoch > 0
      ? []
      : [
          {
            topic: '',
            topicId,
            partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 }],
          },
        ],
  forgottenTopics: [],
  rackId: '',
  clusterId: null,
});

const produceById = (topicId: Uuid, value: string) => ({
  transactionalId: null,
  acks: -1,
  timeoutMs: 5000,
  topics: [
    { name: '', topicId, partitions: [{ index: 0, records: encodeBatch([{ key: null, value: Buffer.from(value), headers: [], timestamp: Date.now() }]) }] },
  ],
});

const commitById = (topicId: Uuid, offset: number) => ({
  groupId: 'tid.g',
  generationId: -1,
  memberId: '',
  groupInstanceId: null,
  retentionTimeMs: -1,
  topics: [
    { name: '', topicId, partitions: [{ partitionIndex: 0, committedOffset: offset, committedLeaderEpoch: -1, commitTimestamp: -1, committedMetadata: null }] },
  ],
});

const createTopic = (name: string) => ({
  topics: [{ name, numPartitions: 1, replicationFactor: -1, assignments: [], configs: [] }],
  timeoutMs: 1000,
  validateOnly: false,
});

describe('kafka topic ids (KIP-516)', () => {
  let dir = '';
  let file = '';
  let broker: Broker;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-topic-ids-'));
    file = join(dir, 'meta.db');
    broker = await startBroker(file);
  });
  after(async () => {
    if (broker) await stopBroker(broker);
    rmSync(dir, { recursive: true, force: true });
  });

  it('gives each topic a stable id, kept across a restart, and a new one when it is made again', async () => {
    let c = await RawClient.connect(broker.port);
    let firstId: Buffer;
    try {
      const ct = await c.call(CreateTopicsApi, 7, createTopic('tid.t'));
      assert.equal(ct.topics[0]!.errorCode, E.NONE);
      firstId = ct.topics[0]!.topicId;
      assert.equal(firstId.length, 16);
      assert.ok(!firstId.equals(ZERO_UUID), 'a real id');
      assert.equal(firstId.toString('hex'), broker.engine.getStream('tid.t')!.def.id);

      // Metadata by name (v10+ reports the id) and by id (v12+).
      const byName = await c.call(MetadataApi, 12, metadataRequest(['tid.t'], false));
      assert.deepEqual(
        byName.topics.map((t) => [t.name, t.errorCode, t.topicId.toString('hex')]),
        [['tid.t', E.NONE, firstId.toString('hex')]],
      );
      const byId = await c.call(MetadataApi, 13, {
        topics: [{ topicId: firstId, name: null }],
        allowAutoTopicCreation: false,
        includeClusterAuthorizedOperations: false,
        includeTopicAuthorizedOperations: false,
      });
      assert.deepEqual(
        byId.topics.map((t) => [t.name, t.errorCode, t.partitions.length]),
        [['tid.t', E.NONE, 1]],
      );
      assert.equal(byId.errorCode, E.NONE);
      const all = await c.call(MetadataApi, 10, metadataRequest(null));
      assert.ok(all.topics.find((t) => t.name === 'tid.t')!.topicId.equals(firstId));
    } finally {
      c.close();
    }

    // A restart reads the same id back from the metastore.
    await stopBroker(broker);
    broker = await startBroker(file);
    c = await RawClient.connect(broker.port);
    try {
      const md = await c.call(MetadataApi, 12, metadataRequest(['tid.t'], false));
      assert.equal(md.topics[0]!.topicId.toString('hex'), firstId.toString('hex'), 'the same id after the restart');

      // Produce v13 and Fetch v13+ by id.
      const p = await c.call(ProduceApi, 13, produceById(firstId, 'one'));
      assert.deepEqual(
        p.topics.map((t) => [t.name, t.topicId?.toString('hex'), t.partitions[0]!.errorCode, t.partitions[0]!.baseOffset]),
        [['', firstId.toString('hex'), E.NONE, 0]],
      );
      const f = await c.call(FetchApi, 18, fetchById(firstId));
      assert.equal(f.responses[0]!.topicId!.toString('hex'), firstId.toString('hex'));
      assert.equal(f.responses[0]!.partitions[0]!.errorCode, E.NONE);
      assert.equal(f.responses[0]!.partitions[0]!.highWatermark, 1);
      assert.ok((f.responses[0]!.partitions[0]!.records ?? []).some((b) => b.length > 0));

      // OffsetCommit v10 / OffsetFetch v10 by id.
      const oc = await c.call(OffsetCommitApi, 10, commitById(firstId, 1));
      assert.equal(oc.topics[0]!.partitions[0]!.errorCode, E.NONE);
      const of = await c.call(OffsetFetchApi, 10, {
        groupId: '',
        topics: null,
        groups: [{ groupId: 'tid.g', memberId: null, memberEpoch: -1, topics: [{ name: '', topicId: firstId, partitionIndexes: [0] }] }],
        requireStable: false,
      });
      assert.deepEqual(
        of.groups[0]!.topics.map((t) => [t.topicId?.toString('hex'), t.partitions[0]!.committedOffset]),
        [[firstId.toString('hex'), 1]],
      );

      // A fetch session by id, made before the topic is re-created.
      const session = await c.call(FetchApi, 13, fetchById(firstId, 0, 0));
      assert.ok(session.sessionId > 0);

      // Deleted (by id, DeleteTopics v6) and made again: a new id.
      const dt = await c.call(DeleteTopicsApi, 6, { topics: [{ name: null, topicId: firstId }], topicNames: [], timeoutMs: 1000 });
      assert.deepEqual(
        dt.responses.map((r) => [r.name, r.errorCode]),
        [['tid.t', E.NONE]],
      );
      const again = await c.call(CreateTopicsApi, 7, createTopic('tid.t'));
      const secondId = again.topics[0]!.topicId;
      assert.ok(!secondId.equals(ZERO_UUID) && !secondId.equals(firstId), 'a new id for the new topic');

      // The old id is UNKNOWN_TOPIC_ID wherever a topic id is taken.
      const oldMd = await c.call(MetadataApi, 12, {
        topics: [{ topicId: firstId, name: null }],
        allowAutoTopicCreation: true,
        includeClusterAuthorizedOperations: false,
        includeTopicAuthorizedOperations: false,
      });
      assert.deepEqual(
        oldMd.topics.map((t) => [t.name, t.errorCode]),
        [[null, E.UNKNOWN_TOPIC_ID]],
      );
      const oldFetch = await c.call(FetchApi, 13, fetchById(firstId));
      assert.deepEqual(
        oldFetch.responses.map((t) => [t.topicId?.toString('hex'), t.partitions.map((p) => p.errorCode)]),
        [[firstId.toString('hex'), [E.UNKNOWN_TOPIC_ID]]],
      );
      const oldProduce = await c.call(ProduceApi, 13, produceById(firstId, 'lost'));
      assert.equal(oldProduce.topics[0]!.partitions[0]!.errorCode, E.UNKNOWN_TOPIC_ID);
      const oldCommit = await c.call(OffsetCommitApi, 10, commitById(firstId, 1));
      assert.equal(oldCommit.topics[0]!.partitions[0]!.errorCode, E.UNKNOWN_TOPIC_ID);
      const oldDelete = await c.call(DeleteTopicsApi, 6, { topics: [{ name: null, topicId: firstId }], topicNames: [], timeoutMs: 1000 });
      assert.equal(oldDelete.responses[0]!.errorCode, E.UNKNOWN_TOPIC_ID);
      assert.equal(broker.engine.offsets('tid.t', 0).highWatermark, 0, 'nothing reached the new topic through the old id');

      // The session knew the topic by its old id, and the name is another topic now: INCONSISTENT_TOPIC_ID.
      const inc = await c.call(FetchApi, 13, fetchById(firstId, session.sessionId, 1));
      assert.deepEqual(
        inc.responses.map((t) => t.partitions.map((p) => p.errorCode)),
        [[E.INCONSISTENT_TOPIC_ID]],
      );

      // The new id works.
      assert.equal((await c.call(ProduceApi, 13, produceById(secondId, 'two'))).topics[0]!.partitions[0]!.errorCode, E.NONE);
      const f2 = await c.call(FetchApi, 17, fetchById(secondId));
      assert.deepEqual(
        f2.responses[0]!.partitions.map((p) => [p.errorCode, p.highWatermark]),
        [[E.NONE, 1]],
      );
    } finally {
      c.close();
    }
  });

  it('answers what Kafka answers for ids where a version has the field but no broker serves it, and follower fetches', async () => {
    const c = await RawClient.connect(broker.port);
    try {
      const id = (await c.call(CreateTopicsApi, 7, createTopic('tid.v'))).topics[0]!.topicId;
      // Metadata v10-11 carry ids and nullable names, which Kafka refuses (InvalidRequestException): every topic
      // INVALID_REQUEST, nothing else in the response.
      for (const v of [10, 11]) {
        const md = await c.call(MetadataApi, v, {
          topics: [
            { topicId: id, name: null },
            { topicId: ZERO_UUID, name: 'tid.v' },
          ],
          allowAutoTopicCreation: false,
          includeClusterAuthorizedOperations: false,
          includeTopicAuthorizedOperations: false,
        });
        assert.deepEqual(
          md.topics.map((t) => [t.name, t.errorCode, t.topicId.toString('hex')]),
          [
            ['', E.INVALID_REQUEST, id.toString('hex')],
            ['tid.v', E.INVALID_REQUEST, '0'.repeat(32)],
          ],
        );
        assert.deepEqual([md.brokers.length, md.controllerId], [0, -1]);
        // By name alone, v10-11 answer as usual, with the id.
        const ok = await c.call(MetadataApi, v, metadataRequest(['tid.v'], false));
        assert.deepEqual(
          ok.topics.map((t) => [t.errorCode, t.topicId.toString('hex')]),
          [[E.NONE, id.toString('hex')]],
        );
      }
      // A follower's fetch (v15+: the replica-state tag): FlowMQ has no follower replicas; a Kafka leader answers a
      // replica it does not know NOT_LEADER_OR_FOLLOWER, or UNKNOWN_LEADER_EPOCH when the request names an epoch.
      const follower = { ...fetchById(id), replicaId: 3, replicaEpoch: 1 };
      const f = await c.call(FetchApi, 15, follower);
      assert.deepEqual(
        f.responses[0]!.partitions.map((p) => p.errorCode),
        [E.NOT_LEADER_OR_FOLLOWER],
      );
      follower.topics[0]!.partitions[0]!.currentLeaderEpoch = 0;
      const f2 = await c.call(FetchApi, 18, follower);
      assert.deepEqual(
        f2.responses[0]!.partitions.map((p) => p.errorCode),
        [E.UNKNOWN_LEADER_EPOCH],
      );
    } finally {
      c.close();
    }
  });
});
