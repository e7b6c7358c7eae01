/**
 * kcat (librdkafka 2.0) against a real `flowmq start` process, across restarts: compressed produce with every
 * codec, -L metadata listing streams created by other means, -Q offsets by time, and a balanced consumer group
 * (-G, librdkafka's range/roundrobin assignors) whose committed offsets survive a restart.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FlowmqProcess, kcatConsume, run } from './harness.js';

const FAST = ['-X', 'fetch.wait.max.ms=50'];

async function kcatProduce(broker: string, args: string[], input: string): Promise<void> {
  const r = await run('kcat', ['-b', broker, '-P', ...FAST, ...args], { input, timeoutMs: 20_000 });
  assert.equal(r.code, 0, r.stderr);
}

/**
 * kcat -G: a balanced consumer group member reading until every assigned partition is at its end. Without -o,
 * it starts from the group's committed offsets (earliest when there are none); -o would override them.
 */
async function kcatGroup(broker: string, group: string, topic: string): Promise<Array<{ partition: number; offset: number; payload: string }>> {
  const r = await run(
    'kcat',
    [
      '-b',
      broker,
      '-G',
      group,
      topic,
      '-e',
      '-J',
      '-q',
      ...FAST,
      '-X',
      'auto.offset.reset=earliest',
      '-X',
      'partition.assignment.strategy=range,roundrobin',
      '-X',
      'session.timeout.ms=6000',
    ],
    { timeoutMs: 30_000 },
  );
  assert.equal(r.code, 0, r.stderr);
  return r.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { partition: number; offset: number; payload: string });
}

describe('kcat against a real broker across restarts', () => {
  let broker: FlowmqProcess;
  before(async () => {
    // No KIP-134 initial rebalance delay: each Kafka group here has one member; 3 s per group proves nothing.
    broker = await FlowmqProcess.start({ args: ['--kafka-default-partitions', '2', '--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('produces with every codec, survives kill -9, reads back with keys, headers and timestamps', async () => {
    const codecs = ['none', 'gzip', 'snappy', 'lz4', 'zstd'];
    for (const [i, z] of codecs.entries()) {
      const lines = Array.from({ length: 10 }, (_, j) => `key${j}:${z}-${i * 10 + j}`).join('\n') + '\n';
      await kcatProduce(broker.kafka, ['-t', 'kc.all', '-p', '0', '-z', z, '-K', ':', '-H', `codec=${z}`], lines);
    }
    await broker.api('POST', '/api/v1/streams', { name: 'plant.telemetry', partitions: 3, bindings: ['plant/+/telemetry'] });
    const md = await run('kcat', ['-b', broker.kafka, '-L', '-J'], { timeoutMs: 15_000 });
    const topics = (JSON.parse(md.stdout) as { topics: Array<{ topic: string; partitions: unknown[] }> }).topics;
    assert.deepEqual(topics.map((t) => [t.topic, t.partitions.length]).sort(), [
      ['kc.all', 2],
      ['plant.telemetry', 3],
    ]);

    await broker.stop('SIGKILL');
    broker = await FlowmqProcess.start({ dataDir: broker.dataDir, args: ['--kafka-group-initial-rebalance-delay', '0'] });
    const msgs = await kcatConsume(broker.kafka, 'kc.all', ['-p', '0', ...FAST]);
    assert.equal(msgs.length, 50);
    assert.deepEqual(
      msgs.map((m) => m.offset),
      Array.from({ length: 50 }, (_, i) => i),
    );
    for (const [i, z] of codecs.entries()) {
      const m = msgs[i * 10 + 3];
      assert.deepEqual([m.key, m.payload, m.headers], ['key3', `${z}-${i * 10 + 3}`, ['codec', z]]);
    }
    // -Q: the first offset at or after a timestamp (the 21st record's own timestamp finds it or an earlier twin).
    const ts = msgs[20].ts;
    const q = await run('kcat', ['-b', broker.kafka, '-Q', '-t', `kc.all:0:${ts}`], { timeoutMs: 15_000 });
    assert.equal(q.code, 0, q.stderr);
    const found = Number(/offset (\d+)/.exec(q.stdout)?.[1]);
    assert.ok(found <= 20 && msgs[found].ts === ts, `offset ${found} for ts ${ts}`);
    const end = await run('kcat', ['-b', broker.kafka, '-Q', '-t', `kc.all:0:${ts + 86_400_000}`], { timeoutMs: 15_000 });
    assert.match(end.stdout, /offset -1/, 'a timestamp after every record has no offset');
  });

  it('a kcat consumer group commits its offsets, which survive a restart', async () => {
    const lines = Array.from({ length: 20 }, (_, i) => `k${i}:g-${i}`).join('\n') + '\n';
    await kcatProduce(broker.kafka, ['-t', 'kc.group', '-K', ':'], lines);
    const first = await kcatGroup(broker.kafka, 'kc-readers', 'kc.group');
    assert.deepEqual(first.map((m) => m.payload).sort(), Array.from({ length: 20 }, (_, i) => `g-${i}`).sort());
    broker = await broker.restart();
    await kcatProduce(broker.kafka, ['-t', 'kc.group', '-K', ':'], 'k100:g-100\nk101:g-101\n');
    const second = await kcatGroup(broker.kafka, 'kc-readers', 'kc.group');
    assert.deepEqual(second.map((m) => m.payload).sort(), ['g-100', 'g-101'], 'only what was not committed');
  });
});
