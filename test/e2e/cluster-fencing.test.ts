// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * Issue 17, fencing: the owner of a partition is frozen (SIGSTOP) past its lease, produce requests reach its socket
 * while it is frozen, another broker takes the partition over and acknowledges more records; then the frozen broker
 * resumes (SIGCONT) and handles the requests it had received under its old epoch. Those late writes must be refused
 * (the WAL and the metastore fence the old epoch): nothing it acknowledged before is lost, nothing is written twice
 * or over the new owner's records, and the partition's offsets stay one contiguous sequence. The old owner learns it
 * was dead to the cluster and comes back as a new incarnation.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import kafkajsPkg from 'kafkajs';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { kcatConsume, sleep } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;

const TOPIC = 'fence.t';

describe('cluster: a paused owner is fenced', { timeout: 120_000 }, () => {
  let c: TestCluster;
  before(async () => {
    c = await startCluster({ brokers: 3, haproxy: false });
    const admin = new Kafka({ brokers: [c.broker(1).kafka], clientId: 'fence-admin', logLevel: logLevel.NOTHING, retry: { retries: 10 } }).admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 1 }], waitForLeaders: true });
    await admin.disconnect();
  });
  after(async () => {
    await c?.close();
  });

  it('SIGSTOP past the lease, SIGCONT: the late writes are refused, nothing acknowledged is lost', async () => {
    await c.waitSettled({ min: { partition: 1 } });
    const x = (await c.ownerOf('partition', `${TOPIC}/0`))!;
    assert.ok(x !== null, 'the partition has an owner');
    const X = c.broker(x);

    // A producer that talks to X only, answers taken as they come (no retries: a refusal must be seen).
    const px = new Kafka({ brokers: [X.kafka], clientId: 'fence-x', logLevel: logLevel.NOTHING, requestTimeout: 60_000, retry: { retries: 0 } }).producer();
    await px.connect();
    const before = Array.from({ length: 20 }, (_, i) => `a${i}`);
    for (const v of before) await px.send({ topic: TOPIC, acks: -1, messages: [{ value: v }] });

    c.pause(x);
    // Requests written to the frozen broker's socket: handled only when it resumes, under its old epoch.
    const late = Array.from({ length: 5 }, (_, i) => `late${i}`);
    const lateResults = late.map((v) =>
      px.send({ topic: TOPIC, acks: -1, messages: [{ value: v }] }).then(
        () => 'acked' as const,
        (err: Error) => `refused: ${err.message}`,
      ),
    );
    await sleep(200);

    // The others see X dead and one of them owns the partition with a newer epoch.
    await c.waitBrokerDead(x, 20_000);
    await c.waitSettled({ min: { partition: 1 } });
    const y = (await c.ownerOf('partition', `${TOPIC}/0`))!;
    assert.notEqual(y, x, 'the partition moved');
    const py = new Kafka({
      brokers: c.running.map((b) => b.kafka),
      clientId: 'fence-y',
      logLevel: logLevel.NOTHING,
      retry: { retries: 20, initialRetryTime: 100 },
    }).producer();
    await py.connect();
    const after = Array.from({ length: 20 }, (_, i) => `b${i}`);
    try {
      for (const v of after) await py.send({ topic: TOPIC, acks: -1, messages: [{ value: v }] });
    } finally {
      await py.disconnect();
    }

    c.resume(x);
    const outcomes = await Promise.all(lateResults);
    await px.disconnect().catch(() => undefined);
    console.log(`fencing: owner ${x} paused, partition moved to ${y}; late sends: ${JSON.stringify(outcomes)}`);

    // X noticed it had been dead to the cluster, and is back as a new incarnation.
    await X.proc.waitForLog((l) => typeof l.msg === 'string' && (l.msg.includes('membership lease expired') || l.msg.includes('a write was fenced')), 20_000);
    await c.waitBrokerAlive(x, 20_000);
    await c.waitSettled({ min: { partition: 1 } });

    const survivor = c.brokers.find((b) => b.id !== x)!;
    const records = await kcatConsume(survivor.kafka, TOPIC);
    const values = records.map((m) => m.payload ?? '');
    // One contiguous sequence of offsets: nothing written over another record.
    assert.deepEqual(
      records.map((m) => m.offset),
      records.map((_, i) => i),
      'contiguous offsets from 0',
    );
    // Everything acknowledged, once, in order: X's before the pause, then Y's.
    const acked = values.filter((v) => !v.startsWith('late'));
    assert.deepEqual(acked, [...before, ...after], 'the acknowledged records, once each and in order');
    // The late writes: refused ones are not in the log; one acknowledged (served by the new owner) is there once.
    late.forEach((v, i) => {
      const n = values.filter((x) => x === v).length;
      if (outcomes[i] === 'acked') assert.equal(n, 1, `${v} was acknowledged: present once`);
      else assert.equal(n, 0, `${v} was refused (${outcomes[i]}): not written`);
    });
    // Nothing of the stale owner's old epoch landed among the new owner's records: a late record acknowledged at all
    // was written after every record the new owner had acknowledged before the resume.
    const firstLate = values.findIndex((v) => v.startsWith('late'));
    if (firstLate >= 0) assert.ok(firstLate > values.indexOf('b19'), `a late record at offset ${firstLate}, before the new owner's last`);
  });
});
