import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CoalescingTask } from '../../src/core/index.js';

function deferred(): { promise: Promise<void>; resolve: () => void; reject: (e: Error) => void } {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('CoalescingTask', () => {
  it('runs once per call when calls do not overlap', async () => {
    let runs = 0;
    const t = new CoalescingTask(async () => {
      runs++;
    });
    await t.run();
    await t.run();
    assert.equal(runs, 2);
  });

  it('gives every caller during a run one shared follow-up run that starts after the call', async () => {
    const gates: ReturnType<typeof deferred>[] = [];
    const started: number[] = [];
    const t = new CoalescingTask(() => {
      const d = deferred();
      gates.push(d);
      started.push(gates.length);
      return d.promise;
    });
    const first = t.run();
    const a = t.run();
    const b = t.run();
    assert.equal(a, b, 'callers during one run share the next run');
    assert.equal(gates.length, 1, 'the follow-up waits for the running one');
    let aDone = false;
    void a.then(() => (aDone = true));
    gates[0].resolve();
    await first;
    await new Promise((r) => setImmediate(r));
    assert.equal(gates.length, 2, 'exactly one follow-up run started');
    assert.equal(aDone, false, 'a caller is not answered by the run that was in flight when it called');
    gates[1].resolve();
    await a;
    assert.deepEqual(started, [1, 2]);
  });

  it('passes a failure to the callers of that run only, and runs again afterwards', async () => {
    let n = 0;
    const t = new CoalescingTask(async () => {
      n++;
      if (n === 1) throw new Error('disk on fire');
    });
    const first = t.run();
    const second = t.run();
    await assert.rejects(first, /disk on fire/);
    await second;
    await t.run();
    assert.equal(n, 3);
    await t.idle();
  });
});
