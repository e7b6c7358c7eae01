/**
 * Slows down repeated login failures per client address and per username, with timers (no CPU) and bounded tables.
 *
 * Per address: the first `freeFailures` failures within `windowMs` cost nothing. After that, the address's checks
 * are spaced out: each failure doubles the spacing (from `baseDelayMs` up to `maxDelayMs`), and each attempt takes
 * the next free slot, so an address gets at most one check per spacing however many sockets it opens. An attempt
 * whose slot is more than `maxDelayMs` away is answered 'busy' at once (it would only pile up timers). A success
 * from the address forgets its failures; so does a quiet `windowMs`.
 *
 * Per username: the same count and doubling, capped at `userMaxDelayMs`, but only as a plain delay before the check:
 * never a refusal, and with no slots. Otherwise whoever knows a username could keep its owner out for as long as
 * they keep failing (a lock-out). The trade-off: an attacker with many addresses can still try one user's password
 * at the verifier's rate (bounded by its threads and queue), only each try waits up to `userMaxDelayMs`; the
 * per-address spacing and strong passwords are the defence there. A real user's login waits at most
 * `userMaxDelayMs` (plus its own address's spacing) and resets the username's count when it succeeds.
 *
 * Each table keeps at most `maxEntries` keys (least recently failed dropped first): random usernames or many
 * addresses cannot grow memory, they can at most push out older entries (which only forgets a slowdown).
 */
import { backoffDelay } from '../util/backoff.js';

export interface AuthThrottleOptions {
  /** Failures per address or username within the window that cost no delay. Default 3. */
  freeFailures?: number;
  /** Failures older than this (counted from the last one) are forgotten. Default 60 s. */
  windowMs?: number;
  /** Delay after the first failure over the free ones; doubled by each further one. Default 250 ms. */
  baseDelayMs?: number;
  /** Cap of the per-address spacing; also how far ahead an attempt may be scheduled. Default 4 s. */
  maxDelayMs?: number;
  /** Cap of the per-username delay. Default 2 s. */
  userMaxDelayMs?: number;
  /** Keys kept per table (addresses, usernames). Default 10,000. */
  maxEntries?: number;
}

interface Entry {
  failures: number;
  last: number;
  /** Earliest time the next check of this address may start. */
  nextSlot: number;
}

export type Admission = { wait: number } | 'busy';

export class AuthThrottle {
  readonly freeFailures: number;
  readonly windowMs: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly userMaxDelayMs: number;
  readonly maxEntries: number;
  private readonly addresses = new Map<string, Entry>();
  private readonly users = new Map<string, Entry>();

  constructor(
    opts: AuthThrottleOptions = {},
    private readonly now: () => number = Date.now,
  ) {
    this.freeFailures = opts.freeFailures ?? 3;
    this.windowMs = opts.windowMs ?? 60_000;
    this.baseDelayMs = opts.baseDelayMs ?? 250;
    this.maxDelayMs = opts.maxDelayMs ?? 4000;
    this.userMaxDelayMs = opts.userMaxDelayMs ?? 2000;
    this.maxEntries = Math.max(1, opts.maxEntries ?? 10_000);
  }

  /** Whether a check may go ahead, and after how many ms; 'busy' when the address is booked too far ahead. */
  admit(username: string, address: string | undefined): Admission {
    const t = this.now();
    let wait = 0;
    const a = address === undefined ? undefined : this.live(this.addresses, address, t);
    const spacing = a ? this.delay(a, this.maxDelayMs) : 0;
    if (a && spacing > 0) {
      const slot = Math.max(t, a.nextSlot);
      if (slot - t > this.maxDelayMs) return 'busy';
      a.nextSlot = slot + spacing;
      wait = slot - t;
    }
    const u = this.live(this.users, username, t);
    if (u) wait = Math.max(wait, this.delay(u, this.userMaxDelayMs));
    return { wait };
  }

  /** A check (or a SCRAM proof) failed. */
  failure(username: string, address: string | undefined): void {
    const t = this.now();
    if (address !== undefined) {
      // The address's next check waits the new spacing from now (not only the one after it): one client retrying
      // in sequence meets every step of the doubling.
      const a = this.bump(this.addresses, address, t);
      a.nextSlot = Math.max(a.nextSlot, t + this.delay(a, this.maxDelayMs));
    }
    if (username !== '') this.bump(this.users, username, t);
  }

  /** A login succeeded: the address and the username start afresh. */
  success(username: string, address: string | undefined): void {
    if (address !== undefined) this.addresses.delete(address);
    this.users.delete(username);
  }

  /** Keys tracked (tests, figures). */
  get size(): { addresses: number; users: number } {
    return { addresses: this.addresses.size, users: this.users.size };
  }

  /** The failure count of an address or username within the window (tests). */
  failures(kind: 'address' | 'user', key: string): number {
    return this.live(kind === 'address' ? this.addresses : this.users, key, this.now())?.failures ?? 0;
  }

  private delay(e: Entry, cap: number): number {
    return backoffDelay(e.failures - this.freeFailures, this.baseDelayMs, cap);
  }

  /** The entry of `key` unless its failures are older than the window (then it is dropped). */
  private live(m: Map<string, Entry>, key: string, t: number): Entry | undefined {
    const e = m.get(key);
    if (e && t - e.last >= this.windowMs && t >= e.nextSlot) {
      m.delete(key);
      return undefined;
    }
    return e;
  }

  private bump(m: Map<string, Entry>, key: string, t: number): Entry {
    let e = this.live(m, key, t);
    if (e)
      m.delete(key); // re-inserted last: the Map's order is least recently failed first
    else e = { failures: 0, last: t, nextSlot: 0 };
    e.failures++;
    e.last = t;
    m.set(key, e);
    while (m.size > this.maxEntries) m.delete(m.keys().next().value!);
    return e;
  }
}
