import { test } from 'node:test';
import assert from 'node:assert/strict';
import { backoffDelay } from '../../src/util/backoff.js';

test('backoffDelay doubles from the first wait up to the cap', () => {
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6, 7].map((n) => backoffDelay(n, 100, 5000)),
    [100, 200, 400, 800, 1600, 3200, 5000],
  );
  assert.equal(backoffDelay(1000, 100, 5000), 5000);
});

test('backoffDelay is 0 before any failure', () => {
  assert.equal(backoffDelay(0, 100, 5000), 0);
  assert.equal(backoffDelay(-3, 100, 5000), 0);
});

test('backoffDelay stays an exact integer for huge attempts', () => {
  assert.equal(backoffDelay(10_000, 250, Number.MAX_SAFE_INTEGER), Math.min(Number.MAX_SAFE_INTEGER, 250 * 2 ** 40));
  assert.ok(Number.isInteger(backoffDelay(10_000, 250, Number.MAX_SAFE_INTEGER)));
});
