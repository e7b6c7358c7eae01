/**
 * The one entry point for every check of a clear-text password (MQTT CONNECT, Kafka SASL PLAIN, HTTP Basic):
 * `check(username, password, remoteAddress)` answers 'ok', 'bad' or 'busy'.
 *
 * A check first passes the AuthThrottle (repeated failures from an address or for a username wait, on a timer,
 * before they are checked at all; an address booked too far ahead is 'busy'), then the PasswordVerifier (scrypt on
 * its own worker thread with a bounded queue; a full queue is 'busy'). Mechanisms that do not send the password
 * (SCRAM) call `admit` before their proof check and report the outcome with `failed` / `succeeded`, so they share
 * the same per-address and per-username counts.
 *
 * 'busy' means "try again later", never "wrong password": MQTT answers CONNACK 0x89 Server busy (v5) / 0x03 Server
 * unavailable (3.1.1), Kafka closes the connection without a SaslAuthenticate answer (see kafka/sasl.ts).
 * Refused logins are logged through the LogLimiter, keyed by address, so a flood writes a bounded number of lines.
 */
import type { Logger } from 'pino';
import { LogLimiter, logKey } from '../util/log-limit.js';
import { AuthThrottle, type AuthThrottleOptions } from './auth-throttle.js';
import { PasswordVerifier, type PasswordVerifierOptions } from './password-verifier.js';
import { DUMMY_PASSWORD_HASH, type UserStore } from './users.js';
import { rabbitHashMatches } from './rabbit-hash.js';

export type PasswordVerdict = 'ok' | 'bad' | 'busy';

export interface PasswordGuardOptions {
  verifier?: PasswordVerifierOptions;
  throttle?: AuthThrottleOptions;
  /** Where refused logins are logged (rate limited); none: not logged. */
  logger?: Logger;
  /** Clock of the throttle (tests). */
  now?: () => number;
}

export class PasswordGuard {
  readonly verifier: PasswordVerifier;
  readonly throttle: AuthThrottle;
  private readonly limiter: LogLimiter | null;
  /** Checks under way (queued or computing) per address: at most the verifier's threads + queue keys. */
  private readonly pending = new Map<string, number>();
  private readonly waiting = new Set<{ timer: NodeJS.Timeout; resolve(go: boolean): void }>();
  private closed = false;
  /** Figures for the admin API: checks answered per verdict, and attempts refused by the throttle alone. */
  readonly stats = { ok: 0, bad: 0, busy: 0, throttled: 0 };

  constructor(
    readonly store: UserStore,
    opts: PasswordGuardOptions = {},
  ) {
    this.verifier = new PasswordVerifier(opts.verifier);
    this.throttle = new AuthThrottle(opts.throttle, opts.now);
    this.limiter = opts.logger ? new LogLimiter(opts.logger) : null;
  }

  /**
   * Checks a clear-text password. Unknown users cost one scrypt like known ones (no timing oracle) and are 'bad'.
   * `via` names the protocol in log lines.
   */
  async check(username: string, password: Buffer | string | null, remoteAddress: string | undefined, via = 'password'): Promise<PasswordVerdict> {
    if (!(await this.admit(username, remoteAddress, via))) return 'busy';
    const user = this.store.lookup(username);
    let r: PasswordVerdict;
    if (password === null || password.length === 0) r = 'bad';
    else {
      // A check from an address that has not failed lately and has no other check under way goes ahead of the rest
      // (see PasswordVerifier): a client logging in once gets in during a flood; an address opening many sockets
      // at once, or one that keeps failing, waits its turn.
      const key = remoteAddress ?? '';
      const pending = this.pending.get(key) ?? 0;
      const priority = remoteAddress !== undefined && pending === 0 && this.throttle.failures('address', remoteAddress) === 0;
      this.pending.set(key, pending + 1);
      try {
        const legacy = user?.rabbitOnly;
        // A user imported with a RabbitMQ hash only: one SHA-256 instead of scrypt (see rabbit-hash.ts).
        if (legacy !== undefined) r = rabbitHashMatches(legacy, password) ? 'ok' : 'bad';
        else r = await this.verifier.verify(password, user?.passwordHash ?? DUMMY_PASSWORD_HASH, priority);
      } finally {
        const left = (this.pending.get(key) ?? 1) - 1;
        if (left > 0) this.pending.set(key, left);
        else this.pending.delete(key);
      }
    }
    if (r === 'ok' && !user) r = 'bad';
    if (r === 'ok') this.succeeded(username, remoteAddress);
    else if (r === 'bad') this.failed(username, remoteAddress, via);
    else {
      this.stats.busy++;
      this.refused('busy', username, remoteAddress, via);
    }
    return r;
  }

  /**
   * Waits as long as the throttle says before a check may run; false ('busy') when the address is booked too far
   * ahead or the guard is closed.
   */
  admit(username: string, remoteAddress: string | undefined, via = 'password'): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    const a = this.throttle.admit(username, remoteAddress);
    if (a === 'busy') {
      this.stats.throttled++;
      this.refused('throttled', username, remoteAddress, via);
      return Promise.resolve(false);
    }
    if (a.wait <= 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const w = {
        timer: setTimeout(() => {
          this.waiting.delete(w);
          resolve(!this.closed);
        }, a.wait),
        resolve,
      };
      this.waiting.add(w);
    });
  }

  /** A check failed (also for SCRAM proofs, which the guard does not compute). */
  failed(username: string, remoteAddress: string | undefined, via = 'password'): void {
    this.stats.bad++;
    this.throttle.failure(username, remoteAddress);
    this.refused('bad credentials', username, remoteAddress, via);
  }

  succeeded(username: string, remoteAddress: string | undefined): void {
    this.stats.ok++;
    this.throttle.success(username, remoteAddress);
  }

  /** Ends the worker threads and answers every waiting check 'busy'. */
  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiting) {
      clearTimeout(w.timer);
      w.resolve(false);
    }
    this.waiting.clear();
    this.limiter?.stop();
    await this.verifier.close();
  }

  private refused(reason: string, username: string, remoteAddress: string | undefined, via: string): void {
    this.limiter?.log('info', logKey('login refused', remoteAddress), { via, username, remote: remoteAddress, reason }, 'login refused');
  }
}
