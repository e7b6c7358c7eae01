import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { WriteBarrier } from '../../../src/protocols/nats/write-barrier.js';

/** A write the test settles by hand. */
function pending(b: WriteBarrier): { ok: () => void; fail: (e: unknown) => void } {
  const [ok, fail] = b.write();
  return { ok, fail };
}

describe('WriteBarrier', () => {
  it('runs an action at once when nothing is pending', () => {
    const b = new WriteBarrier(
      () => {},
      () => {},
    );
    const ran: string[] = [];
    b.after(() => ran.push('a'));
    assert.equal(ran.join(','), 'a');
    assert.equal(b.busy, false);
  });

  it('an action waits for every earlier write, not for later ones; actions run in order', () => {
    let settledCount = 0;
    const b = new WriteBarrier(
      () => settledCount++,
      () => {},
    );
    const ran: string[] = [];
    const w1 = pending(b);
    const w2 = pending(b);
    b.after(() => ran.push('pong1'));
    const w3 = pending(b);
    b.after(() => ran.push('pong2'));
    const w4 = pending(b); // after pong2: neither waits for it
    w3.ok(); // later epoch settled first: nothing runs, pong1 still waits for w1 and w2
    assert.equal(ran.join(','), '');
    w1.ok();
    assert.equal(ran.join(','), '');
    w2.ok(); // pong1's writes, and pong2's (w3 already) are durable: both, in order
    assert.equal(ran.join(','), 'pong1,pong2');
    assert.equal(b.busy, true); // w4
    b.after(() => ran.push('pong3'));
    w4.ok();
    assert.equal(ran.join(','), 'pong1,pong2,pong3');
    assert.equal(settledCount, 4);
    assert.equal(b.busy, false);
  });

  it('a failed write settles (the failure reported) and releases what waits', () => {
    const failures: unknown[] = [];
    const b = new WriteBarrier(
      () => {},
      (e) => failures.push(e),
    );
    const ran: string[] = [];
    const w = pending(b);
    b.after(() => ran.push('pong'));
    w.fail(new Error('disk'));
    assert.equal(ran.join(','), 'pong');
    assert.equal(failures.length, 1);
  });

  it('an action waits at most the bound for a write that does not settle, in order with those after it', async () => {
    const b = new WriteBarrier(
      () => {},
      () => {},
      50,
    );
    const ran: string[] = [];
    const stuck = pending(b);
    const t0 = Date.now();
    b.after(() => ran.push('pong1'));
    await new Promise((r) => setTimeout(r, 30));
    b.after(() => ran.push('pong2'));
    await new Promise((r) => setTimeout(r, 35));
    // pong1 is past the bound; pong2 is not yet.
    assert.equal(ran.join(','), 'pong1');
    assert.ok(Date.now() - t0 >= 50);
    await new Promise((r) => setTimeout(r, 40));
    assert.equal(ran.join(','), 'pong1,pong2');
    // The stuck write settles later: nothing more to run, and new actions run at once again.
    stuck.ok();
    assert.equal(b.busy, false);
    b.after(() => ran.push('pong3'));
    assert.equal(ran.join(','), 'pong1,pong2,pong3');
  });

  it('after close nothing waiting runs', () => {
    const b = new WriteBarrier(
      () => {},
      () => {},
    );
    const ran: string[] = [];
    const w = pending(b);
    b.after(() => ran.push('pong'));
    b.close();
    w.ok();
    assert.equal(ran.join(','), '');
  });
});
