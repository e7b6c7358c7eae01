// test-runner: alone (scripts/test.mjs): steady traffic on four protocols, whose latency and lag samples a second file beside it would distort
/**
 * The soak runner (bench/reliability/soak.ts) for 24 s at 50 msg/s per protocol against a real `flowmq start`: it
 * samples every 2 s, every protocol's traffic is acknowledged, the broker's /metrics give RSS, lag, handles and
 * connections, the chart renders to a PNG; and its growth check fails on a rising trend and passes a flat one.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { growth, runSoak, slope, type SoakSample } from '../../bench/reliability/soak.js';
import { writeSoakChart } from '../../bench/reliability/soak-chart.js';

const sample = (t: number, rssMib: number, handles: number): SoakSample => ({
  t,
  throughput: 1,
  p99Ms: 1,
  rssMib,
  heapMib: 1,
  externalMib: 1,
  objectCacheMib: 1,
  lagP99Ms: 1,
  handles,
  fds: 1,
  connections: 1,
});

it('the growth check: least-squares slopes over the second half, failing beyond the thresholds', () => {
  assert.equal(slope([0, 1, 2, 3], [1, 3, 5, 7]), 2);
  const limits = { maxRssMibPerMin: 4, maxHandlesPerMin: 2 };
  // Warm-up growth in the first half does not count; a flat second half passes.
  const flat = [0, 60, 120, 180, 240, 300].map((t, i) => sample(t, i < 3 ? 100 + i * 50 : 200, 20));
  assert.deepEqual(growth(flat, limits).failures, []);
  // 10 MiB and 5 handles more per minute through the second half: both fail.
  const leaking = [0, 60, 120, 180, 240, 300].map((t) => sample(t, 100 + (t / 60) * 10, 20 + (t / 60) * 5));
  const g = growth(leaking, limits);
  assert.equal(Math.round(g.rssSlopeMibPerMin), 10);
  assert.equal(g.failures.length, 2, g.failures.join('; '));
});

it('a short soak on one broker: samples, all four protocols acknowledged, a PNG chart', async () => {
  const lines: string[] = [];
  const r = await runSoak({ minutes: 0.4, rate: 50, sampleSeconds: 2, maxRssMibPerMin: 1e9, maxHandlesPerMin: 1e9, log: (l) => lines.push(l) });
  assert.ok(r.samples.length >= 9, `samples: ${r.samples.length}`);
  assert.equal(r.errors, 0);
  assert.ok(r.acked >= 4 * 50 * 15, `acknowledged ${r.acked}`);
  const last = r.samples[r.samples.length - 1];
  assert.ok(last.throughput > 100, `throughput ${last.throughput}`);
  assert.ok(last.rssMib > 20 && last.handles > 0 && last.fds > 0, JSON.stringify(last));
  // Kafka producer, consumer (and its coordinator connection), two MQTT clients, AMQP, NATS.
  assert.ok(last.connections >= 6, `connections ${last.connections}`);
  assert.deepEqual(r.failures, []);
  const dir = mkdtempSync(join(tmpdir(), 'flowmq-soak-'));
  try {
    await writeSoakChart(r.samples, 'test', join(dir, 'soak.png'));
    const png = readFileSync(join(dir, 'soak.png'));
    assert.ok(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'a PNG');
    assert.ok(png.length > 5000);
    assert.match(readFileSync(join(dir, 'soak.svg'), 'utf8'), /<polyline/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
