import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { HISTOGRAM_BOUNDS_MS, histogramQuantile, LatencyHistogram } from '../../src/core/index.js';

describe('LatencyHistogram', () => {
  it('answers quantiles within one bucket (±19%) of the exact value', () => {
    const h = new LatencyHistogram();
    const values = Array.from({ length: 1000 }, (_, i) => 0.1 + i * 0.05); // 0.1 .. 50.05 ms
    for (const v of values) h.record(v);
    for (const p of [0.5, 0.9, 0.99]) {
      const exact = values[Math.ceil(p * values.length) - 1];
      const got = histogramQuantile(p, h.snapshot())!;
      assert.ok(got >= exact && got <= exact * 1.19 + 1e-9, `p${p * 100}: ${got} vs ${exact}`);
    }
  });
  it('diffs against an earlier snapshot, so only the interval counts', () => {
    const h = new LatencyHistogram();
    for (let i = 0; i < 100; i++) h.record(100);
    const before = h.snapshot();
    for (let i = 0; i < 100; i++) h.record(1);
    const p99 = histogramQuantile(0.99, h.snapshot(), before)!;
    assert.ok(p99 >= 1 && p99 < 1.2, String(p99));
    assert.equal(histogramQuantile(0.5, before, before), null);
  });
  it('clamps values outside its range into the end buckets', () => {
    const h = new LatencyHistogram();
    h.record(0);
    h.record(1e9);
    const s = h.snapshot();
    assert.equal(s.buckets[0], 1);
    assert.equal(s.buckets[s.buckets.length - 1], 1);
    assert.equal(histogramQuantile(1, s), HISTOGRAM_BOUNDS_MS[HISTOGRAM_BOUNDS_MS.length - 1]);
  });
});

describe('LatencyHistogram sum', () => {
  it('keeps the sum of what it recorded (Prometheus _sum)', () => {
    const h = new LatencyHistogram();
    h.record(1.5);
    h.record(2.25);
    assert.equal(h.snapshot().sumMs, 3.75);
    assert.equal(h.snapshot().count, 2);
  });
});
