/**
 * Exponential backoff, the one formula every retry loop of the broker uses (WAL and seal retries, S3 requests, the
 * cluster channel's reconnects, owner look-ups, the authentication throttle): the n-th wait in a row is
 * `firstMs * 2^(n-1)`, never more than `maxMs`. Jitter, where a caller wants it, is the caller's.
 */

/**
 * The wait before retry number `attempt` (1 for the first failure in a row): `firstMs` doubled per further
 * failure, capped at `maxMs`; 0 when `attempt` is below 1 (nothing failed). The exponent stops growing at 40
 * (past any cap) so the result stays an exact integer for integer inputs.
 */
export function backoffDelay(attempt: number, firstMs: number, maxMs: number): number {
  if (attempt < 1) return 0;
  return Math.min(maxMs, firstMs * 2 ** Math.min(attempt - 1, 40));
}
