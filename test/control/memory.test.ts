import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FloodCollector, processMemory } from '../../src/control/memory.js';

describe('FloodCollector', () => {
  const setup = (minClosed = 1000) => {
    const totals = { opened: 0, closed: 0 };
    let runs = 0;
    const c = new FloodCollector({ totals, collect: () => runs++, minClosed });
    return { totals, c, runs: () => runs };
  };

  it('collects once a flood of connections has gone, and not again until another one has', () => {
    const { totals, c, runs } = setup();
    totals.opened = 7000;
    assert.equal(c.check(), false, 'nothing closed yet');
    totals.closed = 999;
    assert.equal(c.check(), false, 'fewer than minClosed closed');
    totals.closed = 7000;
    assert.equal(c.check(), true);
    assert.equal(runs(), 1);
    assert.equal(c.stats().collections, 1);
    assert.equal(c.stats().last?.closed, 7000);
    assert.equal(c.check(), false, 'the same flood is not collected twice');
    totals.opened += 1000;
    totals.closed += 1000;
    assert.equal(c.check(), true, 'a second flood is');
    assert.equal(runs(), 2);
  });

  it('leaves a broker whose live connections outnumber the closed ones to V8 (the pause grows with the live heap)', () => {
    const { totals, c, runs } = setup();
    totals.opened = 100_000 + 5000;
    totals.closed = 5000;
    assert.equal(c.check(), false);
    totals.opened += 200_000;
    totals.closed += 200_000;
    assert.equal(c.check(), true, 'closed since the last collection now outnumber the open ones');
    assert.equal(runs(), 1);
  });

  it('counts from when it starts, not from the process start', () => {
    const totals = { opened: 5000, closed: 5000 };
    let runs = 0;
    const c = new FloodCollector({ totals, collect: () => runs++ });
    assert.equal(c.check(), false);
    assert.equal(runs, 0);
  });

  it('does nothing without a way to collect (node without --expose-gc)', () => {
    const totals = { opened: 5000, closed: 5000 };
    const c = new FloodCollector({ totals, collect: null });
    totals.opened += 5000;
    totals.closed += 5000;
    assert.equal(c.check(), false);
    c.start();
    c.stop();
    assert.deepEqual(c.stats(), { enabled: false, collections: 0, last: null });
  });

  it('uses globalThis.gc when node offers it', () => {
    const g = globalThis as { gc?: () => void };
    const had = g.gc;
    let runs = 0;
    g.gc = () => runs++;
    try {
      const totals = { opened: 0, closed: 0 };
      const c = new FloodCollector({ totals });
      totals.opened = totals.closed = 1000;
      assert.equal(c.stats().enabled, true);
      assert.equal(c.check(), true);
      assert.equal(runs, 1);
    } finally {
      if (had === undefined) delete g.gc;
      else g.gc = had;
    }
  });
});

describe('processMemory', () => {
  it('reports the resident set, the heap and Buffer memory in bytes', () => {
    const m = processMemory();
    for (const k of ['rss', 'heapTotal', 'heapUsed', 'external', 'arrayBuffers', 'oldSpaceSize', 'oldSpaceUsed'] as const) {
      assert.ok(Number.isInteger(m[k]) && m[k] >= 0, `${k} = ${m[k]}`);
    }
    assert.ok(m.heapUsed <= m.heapTotal && m.oldSpaceUsed <= m.oldSpaceSize && m.oldSpaceSize > 0);
    assert.ok(m.rss > m.heapUsed);
  });
});
