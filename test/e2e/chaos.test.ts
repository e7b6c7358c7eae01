// test-runner: alone (scripts/test.mjs): a 3-broker cluster under faults whose leases and heartbeats must not starve for CPU beside another file
/**
 * The short version of `npm run chaos -- --netns` (bench/reliability/chaos.ts): a three-broker cluster, each broker in
 * its own network namespace (test/helpers/netns.ts: needs root and nftables, which `.ci/run` installs), under Kafka
 * (KafkaJS idempotent, acks=all), MQTT (QoS 1 captured by a stream), AMQP (confirms into a durable queue) and JetStream
 * (PubAcks) traffic, while a seeded nemesis injects one fault of each kind: kill -9 and restart, SIGSTOP past the
 * lease, graceful restart, S3 stalled, S3 connections cut, packets between a broker and PostgreSQL dropped past its
 * lease, packets between a broker and its peers dropped, a broker's link down past its lease, a fourth broker joining
 * and leaving, a bit flipped in a committed segment object (detected, none of its batch served, then restored).
 * Everything acknowledged must be read back, the persistent MQTT subscriber's (QoS 1, a session resumed on another
 * broker after each fault that takes it) included; the idempotent producer's records exactly once and in order per
 * partition and key.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatChaosSummary, runChaos } from '../../bench/reliability/chaos.js';
import type { FaultKind } from '../../bench/reliability/chaos-nemesis.js';

/**
 * The kinds of the short run: torn-write (a kill -9 and restart, as long as `kill`), pg-failover (pg_auto_failover
 * nodes, `--pg-ha`), the slow and lossy kinds and the network's S3 cut are left to `npm run chaos`: this file is in
 * `npm test`, which is over its time budget; bit-flip is cheap (no restart: a flip, a read of a few seconds at most,
 * the object restored).
 */
const KINDS: FaultKind[] = ['kill', 'pause', 'term', 's3-stall', 's3-cut', 'net-pg', 'net-peers', 'net-isolate', 'join-leave', 'bit-flip'];

test('chaos: one fault of each kind under traffic on four protocols, nothing acknowledged lost', { timeout: 300_000 }, async (t) => {
  const s = await runChaos({ minutes: 10, maxFaults: KINDS.length, kinds: KINDS, seed: 7, gapMs: [1000, 2000], netns: true });
  for (const line of formatChaosSummary(s).split('\n')) t.diagnostic(line);
  assert.deepEqual(
    s.faults.map((f) => f.kind),
    KINDS,
  );
  assert.deepEqual(s.checkFailures, [], "the faults' own checks (bit-flip: detected, nothing of the corrupt batch served)");
  for (const f of s.faults) assert.ok(!f.note.startsWith('failed'), `fault ${f.index} (${f.kind}) could not be injected: ${f.note}`);
  const flip = s.faults.find((f) => f.kind === 'bit-flip')!;
  assert.match(flip.note, /detected/, 'the flipped bit was detected');
  const joined = s.faults.find((f) => f.kind === 'join-leave')!;
  assert.match(joined.note, /^broker 4 joined, took \d+ of \d+ partitions and queues, left$/, 'the fourth broker settled in and left cleanly');
  for (const l of s.loads) {
    assert.ok(l.acked > 0, `${l.name}: nothing acknowledged`);
    assert.equal(l.lost, 0, `${l.name}: ${l.lost} acknowledged messages lost, e.g. ${l.lostSample.join(',')}`);
  }
  const kafka = s.loads.find((l) => l.promise === 'exactly-once')!;
  assert.equal(kafka.duplicates, 0, `idempotent Kafka records duplicated: ${s.kafkaDetail.join('; ')}`);
  assert.equal(kafka.orderBreaks, 0, `Kafka order broken: ${s.kafkaBreaks.join('; ')}`);
  assert.equal(s.totals.lost, 0);
  assert.ok(s.ok);
});
