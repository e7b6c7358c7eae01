/**
 * FairGroups: the queue store's group commits taken from per-queue lanes by deficit round robin (issue 24).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FairGroups } from '../../../src/storage/queues/fair-groups.js';

const fill = (g: FairGroups<string>, lane: string, n: number, cost: number) => {
  for (let i = 0; i < n; i++) g.push(lane, `${lane}${i}`, cost);
};

describe('FairGroups', () => {
  it('a light lane joins the next group whole, beside one quantum of the busy lane', () => {
    const g = new FairGroups<string>(10, 1000);
    fill(g, 'f', 100, 1);
    fill(g, 'l', 2, 1);
    const first = g.next();
    assert.deepEqual(
      first.filter((x) => x.startsWith('l')),
      ['l0', 'l1'],
    );
    assert.deepEqual(
      first.filter((x) => x.startsWith('f')),
      ['f0', 'f1', 'f2', 'f3', 'f4', 'f5', 'f6', 'f7', 'f8', 'f9'],
    );
    assert.equal(g.size, 90);
    // Alone again, the busy lane gives up to its solo limit at once.
    assert.equal(g.next().length, 90);
    assert.equal(g.size, 0);
    assert.deepEqual(g.next(), []);
  });

  it('busy lanes share each group by cost, and each lane keeps its order', () => {
    const g = new FairGroups<string>(100, 10_000);
    fill(g, 'a', 50, 10); // 10 per group
    fill(g, 'b', 50, 50); // 2 per group
    fill(g, 'c', 3, 1); // all at once
    const seen: Record<string, string[]> = { a: [], b: [], c: [] };
    const first = g.next();
    assert.equal(first.filter((x) => x[0] === 'a').length, 10);
    assert.equal(first.filter((x) => x[0] === 'b').length, 2);
    assert.equal(first.filter((x) => x[0] === 'c').length, 3);
    for (const x of first) seen[x[0]!]!.push(x);
    while (g.size > 0) for (const x of g.next()) seen[x[0]!]!.push(x);
    for (const [lane, n] of [
      ['a', 50],
      ['b', 50],
      ['c', 3],
    ] as const) {
      assert.deepEqual(
        seen[lane],
        Array.from({ length: n }, (_, i) => `${lane}${i}`),
        `lane ${lane} in order`,
      );
    }
  });

  it('busy lanes without a light one share the group limit: their groups stay large', () => {
    const g = new FairGroups<string>(10, 1000);
    fill(g, 'a', 600, 1);
    fill(g, 'b', 600, 1);
    const first = g.next();
    assert.equal(first.filter((x) => x[0] === 'a').length, 500);
    assert.equal(first.filter((x) => x[0] === 'b').length, 500);
    // A light lane arrives: the next group is small, and holds it whole.
    fill(g, 'l', 3, 1);
    const second = g.next();
    assert.deepEqual(
      second.filter((x) => x[0] === 'l'),
      ['l0', 'l1', 'l2'],
    );
    assert.equal(second.length, 23);
  });

  it('for holdMs after a light lane waited beside a busy one, the busy lane alone still gets small groups', () => {
    let now = 0;
    const g = new FairGroups<string>(10, 1000, 50, () => now);
    fill(g, 'f', 200, 1);
    fill(g, 'l', 1, 1);
    assert.equal(g.next().length, 11);
    now = 30;
    assert.equal(g.next().length, 10, 'within the hold: one quantum');
    now = 60;
    assert.equal(g.next().length, 180, 'after it: the group limit');
    // A light lane alone (a publisher by itself) does not start a hold.
    fill(g, 'l', 1, 1);
    assert.equal(g.next().length, 1);
    fill(g, 'f', 200, 1);
    assert.equal(g.next().length, 200);
  });

  it('a call costlier than a quantum still goes, once its lane has saved up for it', () => {
    const g = new FairGroups<string>(10, 10);
    g.push('big', 'B', 35);
    fill(g, 's', 100, 1);
    let groups = 0;
    let bigAt = -1;
    while (g.size > 0) {
      const grp = g.next();
      assert.ok(grp.length > 0, 'no empty group while calls wait');
      if (grp.includes('B')) bigAt = groups;
      groups++;
    }
    assert.equal(bigAt, 3, 'after four rounds of deficit (4 × 10 ≥ 35)');
  });

  it('a lone lane whose every call is costlier than its limit still gives one call per group', () => {
    const g = new FairGroups<string>(10, 10);
    fill(g, 'x', 3, 25);
    assert.deepEqual(g.next(), ['x0']);
    assert.deepEqual(g.next(), ['x1']);
    assert.deepEqual(g.next(), ['x2']);
  });
});
