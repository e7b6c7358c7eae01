/**
 * The login-failure throttle on a fake clock: free failures, doubling delays with caps, the per-address slots
 * (at most one check per spacing, 'busy' beyond the cap), the per-username delay that never refuses, resets by
 * success and by a quiet window, and tables that stay bounded.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AuthThrottle } from '../../src/control/index.js';

function clock(): { now: () => number; advance(ms: number): void } {
  let t = 1_000_000;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

const opts = { freeFailures: 3, windowMs: 60_000, baseDelayMs: 250, maxDelayMs: 4000, userMaxDelayMs: 2000 };

describe('AuthThrottle', () => {
  it('lets the free failures through, then doubles the wait of an address retrying in sequence, up to its cap', () => {
    const c = clock();
    const t = new AuthThrottle(opts, c.now);
    const waits: number[] = [];
    for (let i = 0; i < 10; i++) {
      const a = t.admit('u' + i, '10.0.0.1');
      assert.notEqual(a, 'busy');
      const wait = a === 'busy' ? -1 : a.wait;
      waits.push(wait);
      c.advance(wait + 10); // the wait, then 10 ms of checking
      t.failure('u' + i, '10.0.0.1');
    }
    assert.deepEqual(waits, [0, 0, 0, 0, 250, 500, 1000, 2000, 4000, 4000]);
  });

  it('gives an address one check per spacing however many attempts it makes, and busy past the cap', () => {
    const c = clock();
    const t = new AuthThrottle(opts, c.now);
    for (let i = 0; i < 6; i++) t.failure('x', '10.0.0.2'); // 3 over the free ones: spacing 1000 ms
    const got = Array.from({ length: 7 }, () => t.admit('y', '10.0.0.2'));
    // Slots 1000 ms apart up to 4000 ms ahead (the cap), then busy: no more than cap/spacing attempts wait at once.
    assert.deepEqual(got, [{ wait: 1000 }, { wait: 2000 }, { wait: 3000 }, { wait: 4000 }, 'busy', 'busy', 'busy']);
    assert.deepEqual(t.admit('y', '10.0.0.3'), { wait: 0 }, 'another address is not affected');
    c.advance(4000);
    assert.notEqual(t.admit('y', '10.0.0.2'), 'busy', 'a booked-out address gets a slot again once time passes');
  });

  it('delays a failing username up to its own cap but never refuses it (no lock-out)', () => {
    const c = clock();
    const t = new AuthThrottle(opts, c.now);
    for (let i = 0; i < 50; i++) t.failure('alice', `10.1.0.${i}`);
    for (let i = 0; i < 100; i++) assert.deepEqual(t.admit('alice', `10.2.0.${i}`), { wait: 2000 });
    assert.deepEqual(t.admit('bob', '10.2.0.1'), { wait: 0 });
  });

  it('forgets an address on success and failures after a quiet window', () => {
    const c = clock();
    const t = new AuthThrottle(opts, c.now);
    for (let i = 0; i < 5; i++) t.failure('alice', '10.0.0.9');
    assert.equal(t.failures('address', '10.0.0.9'), 5);
    t.success('alice', '10.0.0.9');
    assert.equal(t.failures('address', '10.0.0.9'), 0);
    assert.equal(t.failures('user', 'alice'), 0);
    assert.deepEqual(t.admit('alice', '10.0.0.9'), { wait: 0 });
    for (let i = 0; i < 5; i++) t.failure('bob', '10.0.0.8');
    c.advance(59_999);
    assert.equal(t.failures('address', '10.0.0.8'), 5);
    c.advance(1);
    assert.equal(t.failures('address', '10.0.0.8'), 0, 'a quiet window forgets');
    assert.deepEqual(t.admit('bob', '10.0.0.8'), { wait: 0 });
  });

  it('keeps its tables bounded under random usernames and many addresses', () => {
    const c = clock();
    const t = new AuthThrottle({ ...opts, maxEntries: 100 }, c.now);
    for (let i = 0; i < 20_000; i++) t.failure(`random-${i}`, `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
    assert.deepEqual(t.size, { addresses: 100, users: 100 });
    // The most recent failures are the ones kept.
    assert.equal(t.failures('user', 'random-19999'), 1);
    assert.equal(t.failures('user', 'random-0'), 0);
  });
});
