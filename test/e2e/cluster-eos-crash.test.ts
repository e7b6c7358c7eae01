// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * The short version of `npm run crash-test -- --scenario eos-cluster` (bench/reliability/crash-eos-cluster.ts): an
 * exactly-once consume-transform-produce pipeline with librdkafka (python3-confluent-kafka's transactional producer,
 * send_offsets_to_transaction, read_committed input) on three `flowmq start --cluster` brokers, and two kills -9
 * while it copies, each together with the pipeline process, which holds a transaction open with its records written:
 * a broker leading output partitions (not the coordinator), then the broker coordinating the transactional id. The
 * first broker is restarted once its lease expired, the second as soon as its id is free again; a new pipeline
 * process starts at once (its init_transactions aborts what the killed one left open, at the partitions' leaders of
 * the moment). A read_committed reader (kcat) must find every input record in the output exactly once, nothing else,
 * and the group's offsets at the input's end. (The loss the long run found, an abort at a new leader hiding committed
 * records, depends on how old the coordinator's view of a remote partition is: its regression test is
 * test/protocols/kafka/transaction-coordinator.test.ts.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatEosClusterSummary, runEosClusterCrash } from '../../bench/reliability/crash-eos-cluster.js';

const RECORDS = 12000;

test(
  'exactly-once pipeline on a cluster, kill -9 of the coordinator, then of an output leader and the pipeline: each input record once',
  { timeout: 240_000 },
  async (t) => {
    const s = await runEosClusterCrash({ records: RECORDS, kills: 2, roles: ['output-leader', 'coordinator'], killPipelineEvery: 1, seed: 5 });
    for (const line of formatEosClusterSummary(s).split('\n')) t.diagnostic(line);
    const [first, second] = s.kills;
    assert.ok(
      first?.held.some((r) => r.startsWith('out/')) && !first.held.includes('coordinator'),
      `the first victim led output partitions: ${JSON.stringify(first)}`,
    );
    assert.ok(second?.held.includes('coordinator'), `the second coordinated the transactional id: ${JSON.stringify(second)}`);
    assert.ok(first.pipeline && second.pipeline, 'the pipeline was killed with each broker');
    for (const k of s.kills) assert.ok(k.afterTxns > 0 && k.afterTxns < s.committedTxns, `killed while the pipeline copied: ${JSON.stringify(k)}`);
    assert.ok(s.abortedCopies > 0, 'the transaction the killed pipeline left open (its records written) was aborted');
    assert.ok(s.offsetsOk, `the group's offsets are at the input's end: ${JSON.stringify(s.offsets)}`);
    assert.equal(s.lost, 0, 'input records missing from the read_committed output');
    assert.equal(s.duplicates, 0, 'input records copied twice');
    assert.equal(s.extra, 0, 'output records that are no input record');
    assert.equal(s.found, RECORDS);
    assert.ok(s.ok);
  },
);
