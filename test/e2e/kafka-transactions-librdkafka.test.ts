/**
 * Kafka transactions with Debian's python3-confluent-kafka (librdkafka 2.0.2) against a real `flowmq start`:
 * init_transactions, a consume-transform-produce transaction with send_offsets_to_transaction (the group's offset
 * moves at the commit only), an aborted transaction that a read_committed consumer never sees (proved by a committed
 * marker after it) while read_uncommitted does, and zombie fencing (the first of two producers sharing a
 * transactional.id fails with a fatal fencing error). The client side is test/e2e/kafka-transactions-client.py.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, run } from './harness.js';

const CLIENT = join(ROOT, 'test/e2e/kafka-transactions-client.py');
// Debian's interpreter, where python3-confluent-kafka is installed (.ci/run installs it).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

type Step = { step: string; [k: string]: unknown };

async function client(args: string[]): Promise<Map<string, Step>> {
  const r = await run(PYTHON, [CLIENT, ...args], { timeoutMs: 90_000 });
  assert.equal(r.code, 0, `client failed: ${r.stderr}\n${r.stdout}`);
  const m = new Map<string, Step>();
  for (const line of r.stdout.split('\n')) if (line.startsWith('{')) m.set((JSON.parse(line) as Step).step, JSON.parse(line) as Step);
  return m;
}

describe('kafka transactions with librdkafka 2.0.2 (python3-confluent-kafka)', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('consume-transform-produce with send_offsets_to_transaction, an abort, read_committed and read_uncommitted', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'py.in', partitions: 1 });
    await broker.api('POST', '/api/v1/streams', { name: 'py.out', partitions: 1 });
    const s = await client(['ctp', broker.kafka, 'py.in', 'py.out', 'py-group']);
    assert.ok(s.has('init'));
    assert.deepEqual(s.get('consumed')?.values, ['in-0', 'in-1', 'in-2', 'in-3', 'in-4']);
    assert.deepEqual([s.get('committed')?.before, s.get('committed')?.after], [-1001, 5], 'the offset moves at the commit (-1001: none)');
    assert.ok(s.has('aborted'));
    assert.deepEqual(s.get('read_committed')?.values, ['IN-0', 'IN-1', 'IN-2', 'IN-3', 'IN-4', 'marker']);
    assert.deepEqual(s.get('read_uncommitted')?.values, ['IN-0', 'IN-1', 'IN-2', 'IN-3', 'IN-4', 'aborted-0', 'aborted-1', 'aborted-2', 'marker']);
  });

  it('fences the first of two producers with one transactional.id', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'py.fence', partitions: 1 });
    const s = await client(['fence', broker.kafka, 'py.fence']);
    assert.ok(s.has('second-initialized'));
    const z = s.get('zombie')!;
    assert.match(String(z.error), /_FENCED|INVALID_PRODUCER_EPOCH/, JSON.stringify(z));
    assert.equal(z.fatal, true, 'fencing is fatal for the zombie');
    assert.deepEqual(s.get('read_committed')?.values, ['marker'], "the zombie's records were aborted");
  });
});
