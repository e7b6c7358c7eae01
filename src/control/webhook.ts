/**
 * An HTTP authenticator for identities kept outside FlowMQ (an SSO bridge, a device registry): usernames the
 * directory does not know are sent, with their password, to `--auth-webhook`.
 *
 *   POST <url>  Content-Type: application/json
 *   {"username": "...", "password": "...", "protocol": "mqtt", "remoteAddress": "10.0.0.7"}
 *
 * - 200 `{"result": "allow", "groups": [...]?, "namespace": "..."?}` lets the client in with those groups and
 *   namespace (policies then apply to `user:<name>` and the groups as to any user);
 * - 200 with any other result, 401 or 403: wrong credentials ('bad': the client is refused as for a wrong password,
 *   and the failure counts in the guard's throttle);
 * - anything else (another status, a malformed answer, a connection error, no answer within
 *   `--auth-webhook-timeout`): 'busy', never a yes: the protocol answers "server busy, retry", so an authenticator
 *   that is down locks nobody out for good and lets nobody in by accident.
 *
 * Yes answers are cached for `--auth-webhook-cache-ttl` (bounded, oldest first out), keyed by an HMAC of username
 * and password under a key made at start: the cache holds no password, and a reconnect storm after a network blip
 * does not become a storm of webhook calls. Concurrent checks of the same credentials share one request. A
 * password changed at the identity system is honoured once its cached yes expires. Passwords are never logged.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { FlowError } from '../core/index.js';
import { LogLimiter } from '../util/log-limit.js';
import type { ExternalAuthenticator } from './access.js';
import { validateName } from './directory.js';

export type WebhookVerdict = { verdict: 'ok'; groups?: string[]; namespace?: string } | { verdict: 'bad' | 'busy' };

export interface WebhookOptions {
  url: string;
  /** ms; an answer slower than this is 'busy'. */
  timeoutMs: number;
  /** ms a yes is reused for the same username and password (0: ask every time). */
  cacheTtlMs: number;
  /** Most cached yes answers (default 10000). */
  cacheSize?: number;
  logger?: Logger;
  /** Clock of the cache (tests). */
  now?: () => number;
}

interface Cached {
  readonly answer: WebhookVerdict & { verdict: 'ok' };
  readonly expiresAt: number;
}

export class WebhookAuthenticator implements ExternalAuthenticator {
  private readonly url: string;
  private readonly key = randomBytes(32);
  private readonly cache = new Map<string, Cached>();
  private readonly inFlight = new Map<string, Promise<WebhookVerdict>>();
  private readonly limiter: LogLimiter | null;
  private readonly now: () => number;
  private readonly cacheSize: number;
  /** Figures for the admin API and /metrics. */
  readonly stats = { requests: 0, allowed: 0, denied: 0, failed: 0, cacheHits: 0 };

  constructor(private readonly opts: WebhookOptions) {
    let u: URL;
    try {
      u = new URL(opts.url);
    } catch {
      throw new FlowError('CONFIG_ERROR', 'auth-webhook: expected an http:// or https:// URL');
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new FlowError('CONFIG_ERROR', 'auth-webhook: expected an http:// or https:// URL');
    this.url = u.toString();
    this.now = opts.now ?? Date.now;
    this.cacheSize = Math.max(0, opts.cacheSize ?? 10_000);
    this.limiter = opts.logger ? new LogLimiter(opts.logger) : null;
  }

  async check(username: string, password: Buffer | string, ctx: { remoteAddress?: string; protocol: string }): Promise<WebhookVerdict> {
    const pw = typeof password === 'string' ? password : password.toString('utf8');
    const key = createHmac('sha256', this.key).update(username).update('\u0000').update(pw).digest('base64');
    if (this.opts.cacheTtlMs > 0) {
      const hit = this.cache.get(key);
      if (hit !== undefined) {
        if (hit.expiresAt > this.now()) {
          this.stats.cacheHits++;
          return hit.answer;
        }
        this.cache.delete(key);
      }
    }
    let p = this.inFlight.get(key);
    if (p === undefined) {
      p = this.ask(username, pw, ctx).finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, p);
    }
    const answer = await p;
    if (answer.verdict === 'ok' && this.opts.cacheTtlMs > 0 && this.cacheSize > 0) {
      this.cache.delete(key);
      if (this.cache.size >= this.cacheSize) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(key, { answer, expiresAt: this.now() + this.opts.cacheTtlMs });
    }
    return answer;
  }

  /** Cached yes answers right now. */
  get cached(): number {
    return this.cache.size;
  }

  close(): void {
    this.cache.clear();
    this.limiter?.stop();
  }

  private async ask(username: string, password: string, ctx: { remoteAddress?: string; protocol: string }): Promise<WebhookVerdict> {
    this.stats.requests++;
    let status: number;
    let body: unknown;
    try {
      const res = await fetch(this.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({ username, password, protocol: ctx.protocol, remoteAddress: ctx.remoteAddress ?? null }),
        signal: AbortSignal.timeout(this.opts.timeoutMs),
        redirect: 'error',
      });
      status = res.status;
      const text = await res.text();
      if (status === 200) {
        try {
          body = JSON.parse(text);
        } catch {
          return this.fail(username, ctx, 'answer is not JSON', status);
        }
      }
    } catch (err) {
      const e = err as Error;
      return this.fail(username, ctx, e.name === 'TimeoutError' ? `no answer within ${this.opts.timeoutMs} ms` : `request failed: ${e.message}`);
    }
    if (status === 401 || status === 403) return this.denied();
    if (status !== 200) return this.fail(username, ctx, `answered HTTP ${status}`, status);
    if (typeof body !== 'object' || body === null || Array.isArray(body)) return this.fail(username, ctx, 'answer is not a JSON object', status);
    const b = body as Record<string, unknown>;
    if (b.result !== 'allow') return this.denied();
    const answer: { verdict: 'ok'; groups?: string[]; namespace?: string } = { verdict: 'ok' };
    try {
      if (b.groups !== undefined && b.groups !== null) {
        if (!Array.isArray(b.groups)) throw new FlowError('INVALID_ARGUMENT', 'groups must be a list of names');
        answer.groups = b.groups.map((g) => validateName('group', g));
      }
      if (b.namespace !== undefined && b.namespace !== null) answer.namespace = validateName('namespace', b.namespace);
    } catch (err) {
      return this.fail(username, ctx, `answer invalid: ${(err as Error).message}`, status);
    }
    this.stats.allowed++;
    return answer;
  }

  private denied(): WebhookVerdict {
    this.stats.denied++;
    return { verdict: 'bad' };
  }

  private fail(username: string, ctx: { remoteAddress?: string; protocol: string }, reason: string, status?: number): WebhookVerdict {
    this.stats.failed++;
    // Keyed by the reason alone: a webhook that is down fails every login the same way; a few lines say so.
    this.limiter?.log(
      'warn',
      `auth webhook: ${reason}`,
      { username, protocol: ctx.protocol, remote: ctx.remoteAddress, status, reason },
      'auth webhook failed; the login is answered busy',
    );
    return { verdict: 'busy' };
  }
}
