// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Kafka transactions in cluster mode (issue 27), KafkaJS 2.2.4 against three `flowmq start --cluster` processes
 * (test/helpers/cluster.ts: PostgreSQL, s3rver, separate broker processes):
 *
 * - a transactional producer writes to partitions led by different brokers: its transactional id's coordinator
 *   (one broker, FindCoordinator TRANSACTION) has the markers written by each partition's leader; commit and abort,
 *   offsets sent with the transaction reach the group; a read_committed consumer sees exactly the committed records
 *   (proved by non-transactional marker records produced after them), read_uncommitted sees all;
 * - kill -9 of the coordinator with a transaction open: the successor takes the transactional id over, the
 *   producer's commit completes there (or, had it failed, the transaction is aborted): read_committed sees all of
 *   the transaction's records or none, and a new producer with the same transactional.id works after the takeover;
 * - kill -9 of a partition's leader (not the coordinator) after an abort and with a transaction open there: the new
 *   leader holds read_committed at the open transaction's first offset (ListOffsets read_committed), the commit's
 *   marker reaches it, and the aborted records stay hidden from read_committed;
 * - the coordinator killed mid-commit (PrepareCommit stored, one partition's leader frozen so its marker is not
 *   written): the successor takes the id over by itself and completes the commit; read_committed sees all of it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import type { Kafka as KafkaT } from 'kafkajs';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { eventually } from './harness.js';
import { rendezvous } from '../../src/cluster/index.js';
import { DescribeTransactionsApi, KafkaErrorCode as E, ListOffsetsApi } from '../../src/protocols/kafka/codec/index.js';
import { RawClient } from '../protocols/kafka/helpers.js';

const { Kafka, logLevel } = kafkajsPkg;
const TOPIC = 'ctx';
const PARTITIONS = 6;

describe('cluster: Kafka transactions across broker processes', { timeout: 300_000 }, () => {
  let c: TestCluster;
  const kafka = (clientId: string): KafkaT =>
    new Kafka({
      brokers: c.running.map((b) => b.kafka),
      clientId,
      logLevel: logLevel.NOTHING,
      retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 2000 },
    });

  /** Reads the topic from the beginning until `until` holds; the values seen. */
  async function readAll(readUncommitted: boolean, until: (values: string[]) => boolean): Promise<string[]> {
    const consumer = kafka(`ctx-reader-${readUncommitted}`).consumer({
      groupId: `ctx-reader-${readUncommitted}-${Math.random()}`,
      readUncommitted,
      maxWaitTimeInMs: 200,
    });
    const values: string[] = [];
    await consumer.connect();
    try {
      await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ message }) => {
          values.push(message.value?.toString() ?? '');
        },
      });
      await eventually(() => until(values), 60_000, `read_${readUncommitted ? 'uncommitted' : 'committed'}: ${JSON.stringify(values)}`);
    } finally {
      await consumer.disconnect();
    }
    return values;
  }

  /** One non-transactional record per partition, produced after what is under test: a reader that saw them all saw everything before. */
  async function markers(tag: string): Promise<void> {
    const p = kafka(`ctx-marker-${tag}`).producer();
    await p.connect();
    await p.send({ topic: TOPIC, acks: -1, messages: Array.from({ length: PARTITIONS }, (_, i) => ({ partition: i, value: `${tag}-p${i}` })) });
    await p.disconnect();
  }

  const perPartition = (tag: string) => Array.from({ length: PARTITIONS }, (_, i) => ({ partition: i, value: `${tag}-p${i}` }));
  const withTag = (values: string[], tag: string) => values.filter((v) => v.startsWith(`${tag}-`)).sort();
  const expected = (tag: string) =>
    perPartition(tag)
      .map((m) => m.value)
      .sort();

  before(async () => {
    c = await startCluster({ brokers: 3, haproxy: false, args: ['--kafka-group-initial-rebalance-delay', '0'] });
    const admin = new Kafka({ brokers: [c.broker(1).kafka], clientId: 'ctx-admin', logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: PARTITIONS }], waitForLeaders: true });
    await admin.disconnect();
    await c.waitCatalog({ streams: [TOPIC] });
    await c.waitSettled({ min: { partition: PARTITIONS } });
  });
  after(async () => {
    await c?.close();
  });

  it('commit and abort over partitions led by three brokers: read_committed sees exactly the committed records', async () => {
    const { owners } = await c.owners('partition');
    const leaders = new Set(owners.filter((o) => o.name.startsWith(`${TOPIC}/`)).map((o) => o.owner));
    assert.ok(leaders.size >= 2, `the partitions are led by several brokers (${[...leaders]})`);

    const producer = kafka('ctx-1').producer({ transactionalId: 'ctx-1', maxInFlightRequests: 1, idempotent: true });
    await producer.connect();
    try {
      let txn = await producer.transaction();
      await txn.send({ topic: TOPIC, messages: perPartition('c1') });
      await txn.commit();
      txn = await producer.transaction();
      await txn.send({ topic: TOPIC, messages: perPartition('a1') });
      await txn.abort();
      txn = await producer.transaction();
      await txn.send({ topic: TOPIC, messages: perPartition('c2') });
      await txn.sendOffsets({ consumerGroupId: 'ctx-group', topics: [{ topic: TOPIC, partitions: [{ partition: 0, offset: '42' }] }] });
      await txn.commit();
    } finally {
      await producer.disconnect();
    }
    const coordinator = await c.ownerOf('txn', 'ctx-1');
    assert.ok(coordinator !== null, 'one broker coordinates the transactional id');
    await markers('e1');

    const committed = await readAll(false, (v) => withTag(v, 'e1').length === PARTITIONS);
    assert.deepEqual(withTag(committed, 'c1'), expected('c1'));
    assert.deepEqual(withTag(committed, 'c2'), expected('c2'));
    assert.deepEqual(withTag(committed, 'a1'), [], 'no aborted record reaches read_committed');
    assert.equal(committed.length, 3 * PARTITIONS, `exactly the committed records and the markers: ${JSON.stringify(committed)}`);

    const all = await readAll(true, (v) => withTag(v, 'e1').length === PARTITIONS);
    for (const tag of ['c1', 'a1', 'c2']) assert.deepEqual(withTag(all, tag), expected(tag), `read_uncommitted sees ${tag}`);

    // The offsets sent with the committed transaction reached the group (at its coordinator).
    const admin = kafka('ctx-admin2').admin();
    await admin.connect();
    try {
      const offsets = await admin.fetchOffsets({ groupId: 'ctx-group', topics: [TOPIC] });
      assert.equal(offsets[0].partitions.find((p) => p.partition === 0)?.offset, '42');
    } finally {
      await admin.disconnect();
    }
  });

  it('kill -9 of the coordinator with a transaction open: the successor completes it, a new producer with the id works', async () => {
    const id = 'ctx-fail';
    const producer = kafka('ctx-fail-1').producer({ transactionalId: id, maxInFlightRequests: 1, idempotent: true, transactionTimeout: 30_000 });
    await producer.connect();
    let txn = await producer.transaction();
    await txn.send({ topic: TOPIC, messages: perPartition('f1') });
    await txn.commit();

    const coordinator = await c.ownerOf('txn', id);
    assert.ok(coordinator !== null);
    txn = await producer.transaction();
    await txn.send({ topic: TOPIC, messages: perPartition('f2') });
    await c.kill(coordinator);

    // The producer finds the successor (NOT_COORDINATOR / connection errors make it look again) and commits there.
    let f2Committed = false;
    try {
      await txn.commit();
      f2Committed = true;
    } catch {
      // Not committed: the successor aborts it (the next initialization of the id, or its timeout).
    }
    await producer.disconnect().catch(() => undefined);
    await c.waitBrokerDead(coordinator, 30_000);

    // A new incarnation of the transactional id works after the takeover.
    const again = kafka('ctx-fail-2').producer({ transactionalId: id, maxInFlightRequests: 1, idempotent: true });
    await again.connect();
    try {
      const t = await again.transaction();
      await t.send({ topic: TOPIC, messages: perPartition('f3') });
      await t.commit();
    } finally {
      await again.disconnect();
    }
    const successor = await c.ownerOf('txn', id);
    assert.ok(successor !== null && successor !== coordinator, `another broker coordinates ${id} (${successor})`);
    await markers('e2');

    const committed = await readAll(false, (v) => withTag(v, 'e2').length === PARTITIONS);
    assert.deepEqual(withTag(committed, 'f1'), expected('f1'));
    assert.deepEqual(withTag(committed, 'f3'), expected('f3'));
    const f2 = withTag(committed, 'f2');
    assert.ok(f2.length === 0 || f2.length === PARTITIONS, `the transaction is all or nothing: ${JSON.stringify(f2)}`);
    if (f2Committed) assert.deepEqual(f2, expected('f2'), 'the commit acknowledged after the takeover is visible');
    assert.deepEqual(withTag(committed, 'a1'), []);
  });
  it("kill -9 of a partition's leader with a transaction open there: the new leader keeps the LSO and the aborted list", async () => {
    const { owners } = await c.owners('partition');
    const leaderOf = (p: number) => owners.find((o) => o.name === `${TOPIC}/${p}`)!.owner!;
    const live = c.running.map((b) => b.id);
    // A partition led by one live broker and a transactional id coordinated by another.
    const partition = Array.from({ length: PARTITIONS }, (_, i) => i).find((i) => live.includes(leaderOf(i)))!;
    const victim = leaderOf(partition);
    let id = '';
    for (let n = 0; id === ''; n++) if (rendezvous('txn', `ctx-lead-${n}`, live) !== victim) id = `ctx-lead-${n}`;
    const survivor = c.running.find((b) => b.id !== victim)!;

    const producer = kafka(`${id}-p`).producer({ transactionalId: id, maxInFlightRequests: 1, idempotent: true, transactionTimeout: 60_000 });
    await producer.connect();
    try {
      let txn = await producer.transaction();
      await txn.send({ topic: TOPIC, messages: [{ partition, value: `la-p${partition}` }] });
      await txn.abort();
      txn = await producer.transaction();
      await txn.send({ topic: TOPIC, messages: [{ partition, value: `lc-p${partition}` }] });
      assert.equal(await c.ownerOf('txn', id), rendezvous('txn', id, live), 'the id is coordinated where placement puts it');

      await c.kill(victim);
      await c.waitBrokerDead(victim, 30_000);
      await c.waitSettled({ timeoutMs: 60_000 });
      // The new leader holds read_committed at the open transaction: its latest read_committed offset is below the
      // high watermark (the transaction's record and nothing after it are stable).
      const raw = await RawClient.connect(Number(survivor.kafka.split(':')[1]));
      try {
        const latest = async (isolationLevel: number) => {
          // The owner row can name the new leader a moment before it serves the partition (it is loading it).
          for (let tries = 0; ; tries++) {
            const r = await raw.call(ListOffsetsApi, 4, {
              replicaId: -1,
              isolationLevel,
              topics: [{ name: TOPIC, partitions: [{ partitionIndex: partition, currentLeaderEpoch: -1, timestamp: -1 }] }],
            });
            const p = r.topics[0].partitions[0];
            if (p.errorCode === E.NOT_LEADER_OR_FOLLOWER && tries < 200) {
              await new Promise((res) => setTimeout(res, 100));
              continue;
            }
            assert.equal(p.errorCode, E.NONE);
            return Number(p.offset);
          }
        };
        const [lso, hw] = [await latest(1), await latest(0)];
        assert.ok(lso < hw, `the LSO (${lso}) is held below the high watermark (${hw}) by the open transaction`);
        await txn.commit();
        await eventually(async () => (await latest(1)) === (await latest(0)), 20_000, 'the LSO reaches the high watermark at the commit');
      } finally {
        raw.close();
      }
    } finally {
      await producer.disconnect();
    }
    await markers('e3');
    const committed = await readAll(false, (v) => withTag(v, 'e3').length === PARTITIONS);
    assert.deepEqual(withTag(committed, 'lc'), [`lc-p${partition}`], 'the committed record');
    assert.deepEqual(withTag(committed, 'la'), [], 'the record aborted under the dead leader stays hidden');
    assert.deepEqual(withTag(committed, 'a1'), []);
  });
});

describe('cluster: a Kafka transaction coordinator killed in the middle of a commit', { timeout: 300_000 }, () => {
  let c: TestCluster;
  before(async () => {
    // An 8 s lease: the frozen leader keeps its partition (and the commit stays in PrepareCommit) long enough to
    // see PrepareCommit and kill the coordinator in that state.
    c = await startCluster({ brokers: 3, haproxy: false, leaseMs: 8000 });
    const admin = new Kafka({ brokers: [c.broker(1).kafka], clientId: 'mid-admin', logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: 'mid', numPartitions: 3 }], waitForLeaders: true });
    await admin.disconnect();
    await c.waitCatalog({ streams: ['mid'] });
    await c.waitSettled({ min: { partition: 3 } });
  });
  after(async () => {
    await c?.close();
  });

  it('PrepareCommit stored, a marker not yet written: the successor completes the commit', async () => {
    const { owners } = await c.owners('partition');
    const live = c.running.map((b) => b.id);
    const leaderOf = (p: number) => owners.find((o) => o.name === `mid/${p}`)!.owner!;
    // The transaction writes to a partition led by `stuck` and is coordinated by another broker, `coordinator`.
    const partition = [0, 1, 2].find((p) => live.includes(leaderOf(p)))!;
    const stuck = leaderOf(partition);
    let id = '';
    for (let n = 0; id === ''; n++) if (rendezvous('txn', `mid-${n}`, live) !== stuck) id = `mid-${n}`;
    const coordinator = rendezvous('txn', id, live)!;
    const kafka = new Kafka({
      brokers: c.running.map((b) => b.kafka),
      clientId: 'mid',
      logLevel: logLevel.NOTHING,
      // A request KafkaJS sends to the frozen broker (FindCoordinator goes to any connected broker) must time out
      // and be retried elsewhere well within the test's waits.
      requestTimeout: 3000,
      retry: { retries: 30, initialRetryTime: 100, maxRetryTime: 2000 },
    });
    const producer = kafka.producer({ transactionalId: id, maxInFlightRequests: 1, idempotent: true, transactionTimeout: 60_000 });
    await producer.connect();
    const txn = await producer.transaction();
    await txn.send({ topic: 'mid', messages: [0, 1, 2].map((p) => ({ partition: p, value: `m-p${p}` })) });

    // The partition's leader freezes: the coordinator decides the commit (PrepareCommit, stored) and cannot finish.
    c.pause(stuck);
    let commitOutcome: string | null = null;
    const commit = txn.commit().then(
      () => (commitOutcome = 'committed'),
      (err: Error) => (commitOutcome = `failed: ${err.message}`),
    );
    const raw = await RawClient.connect(Number(c.broker(coordinator).kafka.split(':')[1]));
    try {
      let seen = '';
      await eventually(
        async () => {
          const d = (await raw.call(DescribeTransactionsApi, 0, { transactionalIds: [id] })).transactionStates[0];
          seen = `${d.errorCode} ${d.transactionState}`;
          return d.transactionState === 'PrepareCommit';
        },
        45_000,
        'the coordinator stored PrepareCommit',
      ).catch((err: Error) => {
        throw new Error(`${err.message}; last seen: ${seen}; commit: ${String(commitOutcome)}`);
      });
    } finally {
      raw.close();
    }
    await c.kill(coordinator);
    c.resume(stuck);
    // KafkaJS does not retry an EndTxn whose connection closed under it: the commit's outcome is the successor's.
    const outcome = await commit;
    assert.ok(outcome === 'committed' || /closed connection|connection error|ECONNRESET/i.test(outcome), outcome);
    await producer.disconnect().catch(() => undefined);
    // The successor takes the id over (a dead broker's ids are orphans, taken by their new placement broker) and
    // completes the commit it finds decided, writing the marker at the partition's new leader.
    let successor: number | null = null;
    await eventually(
      async () => {
        successor = await c.ownerOf('txn', id);
        return successor !== null && successor !== coordinator;
      },
      30_000,
      'a successor coordinates the id',
    );
    const at = await RawClient.connect(Number(c.broker(successor!).kafka.split(':')[1]));
    try {
      await eventually(
        async () => {
          const d = await at.call(DescribeTransactionsApi, 0, { transactionalIds: [id] });
          return d.transactionStates[0].transactionState === 'CompleteCommit';
        },
        60_000,
        'the successor completed the commit',
      );
    } finally {
      at.close();
    }

    const marker = kafka.producer();
    await marker.connect();
    await marker.send({ topic: 'mid', acks: -1, messages: [0, 1, 2].map((p) => ({ partition: p, value: `end-p${p}` })) });
    await marker.disconnect();
    const consumer = kafka.consumer({ groupId: `mid-reader-${Math.random()}`, readUncommitted: false, maxWaitTimeInMs: 200 });
    const values: string[] = [];
    await consumer.connect();
    try {
      await consumer.subscribe({ topic: 'mid', fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ message }) => {
          values.push(message.value?.toString() ?? '');
        },
      });
      await eventually(() => values.filter((v) => v.startsWith('end-')).length === 3, 60_000, `read_committed: ${JSON.stringify(values)}`);
    } finally {
      await consumer.disconnect();
    }
    assert.deepEqual(values.filter((v) => v.startsWith('m-')).sort(), ['m-p0', 'm-p1', 'm-p2'], 'the whole transaction is committed');
  });
});
