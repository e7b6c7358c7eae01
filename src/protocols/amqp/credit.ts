/**
 * Per-connection credit for publishes whose store writes have not settled (RabbitMQ's credit_flow: a channel may
 * have 400 messages in flight towards a queue, and gets more credit as 200 of them are done).
 *
 * Why: the queue store group-commits writes (fairly between queues: src/storage/queues/fair-groups.ts, but in
 * arrival order within one queue). A publisher without confirms can hand the broker far more than the store takes;
 * with 10,000 writes in flight per connection, one such publisher flooding a durable queue pushed another client's
 * confirm p99 from 12 ms to 786 ms (issue 24): every write of the other client queued behind thousands of the
 * flooder's. With a small credit the connection is not read past it (TCP pushes back on the flooder, which the
 * store's fair groups slow down when other queues wait) and another client's write to the same queue waits behind
 * at most one credit's worth of each other connection's.
 *
 * Counted: writes and their body bytes (a credit of 400 1 MiB messages would still be 400 MiB ahead of everybody
 * else). Settlements are matched to sizes in the order the writes started (a ring of sizes, no allocation per
 * publish); writes to one store settle in that order, and where they do not the bytes in flight are an estimate
 * that is exact again whenever nothing is in flight.
 */
export class PublishCredit {
  writes = 0;
  bytes = 0;
  private sizes = new Float64Array(16);
  private head = 0;

  constructor(
    private readonly maxWrites: number,
    private readonly maxBytes: number,
  ) {}

  /** A write of `bytes` started; true when the connection is now out of credit (stop reading it). */
  started(bytes: number): boolean {
    if (this.writes === this.sizes.length) this.grow();
    this.sizes[(this.head + this.writes) & (this.sizes.length - 1)] = bytes;
    this.writes++;
    this.bytes += bytes;
    return this.writes >= this.maxWrites || this.bytes >= this.maxBytes;
  }

  /** A write settled; true when half the credit is back (read the connection again). */
  settled(): boolean {
    if (this.writes === 0) return true;
    this.bytes -= this.sizes[this.head]!;
    this.head = (this.head + 1) & (this.sizes.length - 1);
    this.writes--;
    if (this.writes === 0) this.bytes = 0;
    return this.writes <= this.maxWrites >> 1 && this.bytes <= this.maxBytes / 2;
  }

  private grow(): void {
    const next = new Float64Array(this.sizes.length * 2);
    for (let i = 0; i < this.writes; i++) next[i] = this.sizes[(this.head + i) & (this.sizes.length - 1)]!;
    this.sizes = next;
    this.head = 0;
  }
}
