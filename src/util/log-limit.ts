/**
 * Rate limits for log lines a client can trigger (connect timeouts, protocol errors, unsupported requests, failed
 * logins). A hostile client, or many of them, must not be able to fill the disk with logs or spend the broker's
 * CPU on formatting them.
 *
 * Each line has a key, normally `<event>|<remote address>`: per key, at most `perKey` lines are written in a
 * window of `windowMs`; all keys together at most `global` lines per window (an attacker with many addresses is
 * still bounded). What goes over the limit is counted, and the count is reported on the next line written for that
 * key (`suppressed: n`), or by `sweep()` (run every window by the limiter's own timer) in one summary line per key
 * once its window has passed, so nothing is dropped silently. The limiter tracks at most `maxKeys` keys; past that,
 * new keys share one overflow key.
 */
import type { Logger } from 'pino';

export interface LogLimitOptions {
  /** Lines per key per window. Default 5. */
  perKey?: number;
  /** Lines over all keys per window. Default 100. */
  global?: number;
  /** Window length. Default 10 s. */
  windowMs?: number;
  /** Keys tracked at once. Default 10,000. */
  maxKeys?: number;
}

type Level = 'debug' | 'info' | 'warn' | 'error';

interface KeyState {
  windowStart: number;
  logged: number;
  suppressed: number;
  level: Level;
  msg: string;
}

const OVERFLOW_KEY = '(other)';

export class LogLimiter {
  private readonly perKey: number;
  private readonly global: number;
  private readonly windowMs: number;
  private readonly maxKeys: number;
  private readonly keys = new Map<string, KeyState>();
  private globalStart = 0;
  private globalLogged = 0;
  private timer: NodeJS.Timeout | null = null;
  /** Lines suppressed since start (all keys): a figure for the admin API. */
  suppressedTotal = 0;

  constructor(
    private readonly logger: Logger,
    opts: LogLimitOptions = {},
    private readonly now: () => number = Date.now,
  ) {
    this.perKey = opts.perKey ?? 5;
    this.global = opts.global ?? 100;
    this.windowMs = opts.windowMs ?? 10_000;
    this.maxKeys = opts.maxKeys ?? 10_000;
  }

  /**
   * Writes `msg` with `fields` at `level` unless `key` (or all keys together) is over its limit in this window, in
   * which case the line is counted as suppressed. Returns whether the line was written.
   */
  log(level: Level, key: string, fields: Record<string, unknown>, msg: string): boolean {
    if (!this.logger.isLevelEnabled(level)) return false;
    const t = this.now();
    let s = this.keys.get(key);
    if (s === undefined) {
      if (this.keys.size >= this.maxKeys) {
        key = OVERFLOW_KEY;
        s = this.keys.get(key);
      }
      if (s === undefined) {
        s = { windowStart: t, logged: 0, suppressed: 0, level, msg };
        this.keys.set(key, s);
        this.startTimer();
      }
    }
    if (t - s.windowStart >= this.windowMs) {
      s.windowStart = t;
      s.logged = 0;
    }
    if (t - this.globalStart >= this.windowMs) {
      this.globalStart = t;
      this.globalLogged = 0;
    }
    s.level = level;
    s.msg = msg;
    if (s.logged >= this.perKey || this.globalLogged >= this.global) {
      s.suppressed++;
      this.suppressedTotal++;
      return false;
    }
    s.logged++;
    this.globalLogged++;
    if (s.suppressed > 0) {
      this.logger[level]({ ...fields, suppressed: s.suppressed }, msg);
      s.suppressed = 0;
    } else {
      this.logger[level](fields, msg);
    }
    return true;
  }

  /**
   * Reports the counts of keys whose window has passed with lines suppressed (one summary line each, not rate
   * limited further: at most one per key per window), and forgets keys that have been quiet for a window.
   */
  sweep(): void {
    const t = this.now();
    for (const [key, s] of this.keys) {
      if (t - s.windowStart < this.windowMs) continue;
      if (s.suppressed > 0) {
        this.logger[s.level]({ key, suppressed: s.suppressed }, `${s.msg} (repeated lines suppressed)`);
        s.suppressed = 0;
        s.windowStart = t;
        s.logged = 0;
      } else {
        this.keys.delete(key);
      }
    }
    if (this.keys.size === 0) this.stop();
  }

  /** Stops the sweep timer (it also stops by itself once no key is tracked). */
  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Keys currently tracked (tests). */
  get size(): number {
    return this.keys.size;
  }

  private startTimer(): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => this.sweep(), this.windowMs);
    this.timer.unref();
  }
}

/** The key of a client-triggered line: the event and the client's address (without its port). */
export function logKey(event: string, remoteAddress: string | undefined): string {
  return `${event}|${remoteAddress ?? '?'}`;
}
