/**
 * How the CLI talks to a broker's admin API (/api/v1): where (`--server`, FLOWMQ_SERVER, default
 * http://127.0.0.1:8080), as whom (an API token: `--token` / FLOWMQ_TOKEN, sent as Bearer; or a user: `--user` /
 * FLOWMQ_USER with FLOWMQ_PASSWORD or a prompt on the terminal, sent as HTTP Basic), and what an answer means
 * (the API's JSON error envelope becomes an ApiError carrying its message and code).
 */
import { UsageError } from './usage-error.js';

export type Auth = { kind: 'token'; token: string } | { kind: 'basic'; name: string; password: string } | null;

/** The broker refused the request or could not be reached: exit code 1, the message as the API said it. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
  }
}

/** A page of a list route. */
export interface Page<T> {
  items: T[];
  next: string | null;
}

const PAGE = 1000;

export class ApiClient {
  constructor(
    readonly server: string,
    readonly auth: Auth,
  ) {}

  async request<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    // Every request but GET carries the JSON content type, body or not: the broker refuses state-changing
    // requests without it (a cross-site form cannot send it).
    if (method !== 'GET') headers['content-type'] = 'application/json';
    if (this.auth?.kind === 'token') headers.authorization = `Bearer ${this.auth.token}`;
    else if (this.auth?.kind === 'basic') {
      headers.authorization = `Basic ${Buffer.from(`${this.auth.name}:${this.auth.password}`, 'utf8').toString('base64')}`;
    }
    let res: Response;
    try {
      res = await fetch(new URL(path, this.server), {
        method,
        headers,
        body: body === undefined ? (method === 'GET' ? undefined : '{}') : JSON.stringify(body),
      });
    } catch (e) {
      throw new ApiError(
        `cannot reach the broker at ${this.server}: ${((e as Error).cause as Error | undefined)?.message ?? (e as Error).message}`,
        0,
        'UNREACHABLE',
      );
    }
    const text = await res.text();
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      if (res.ok) throw new ApiError(`the server at ${this.server} did not answer with JSON (is it a FlowMQ admin API?)`, res.status, 'NOT_JSON');
    }
    if (res.status === 401) {
      const a = this.auth;
      throw new ApiError(
        a === null
          ? `the broker at ${this.server} requires a user: pass --user NAME (or set FLOWMQ_USER) and the password in FLOWMQ_PASSWORD, or an API token with --token (or FLOWMQ_TOKEN)`
          : a.kind === 'basic'
            ? `the broker at ${this.server} refused user "${a.name}": invalid username or password`
            : `the broker at ${this.server} refused the API token: unknown, deleted or expired`,
        401,
        'UNAUTHENTICATED',
      );
    }
    if (!res.ok) {
      const err = (data as { error?: { code?: string; message?: string } } | null)?.error;
      const code = err?.code ?? String(res.status);
      throw new ApiError(`${err?.message ?? res.statusText} (${code})`, res.status, code);
    }
    return data as T;
  }

  /**
   * Every item of a list route, following its cursor (`{items, next}`), or the first `limit`. An answer of the
   * older shape (`{<key>: [...]}`) is taken as one page.
   */
  async list<T = Record<string, unknown>>(path: string, query: Record<string, string | undefined> = {}, limit?: number): Promise<T[]> {
    const out: T[] = [];
    let cursor: string | null = null;
    for (;;) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') q.set(k, v);
      q.set('limit', String(Math.min(PAGE, limit === undefined ? PAGE : limit - out.length)));
      if (cursor !== null) q.set('cursor', cursor);
      const page = await this.request<Page<T> | Record<string, unknown>>('GET', `${path}?${q}`);
      if (Array.isArray((page as Page<T>).items)) {
        out.push(...(page as Page<T>).items);
        cursor = (page as Page<T>).next ?? null;
      } else {
        const arr = Object.values(page ?? {}).find(Array.isArray) as T[] | undefined;
        out.push(...(arr ?? []));
        cursor = null;
      }
      if (cursor === null || (limit !== undefined && out.length >= limit)) return limit === undefined ? out : out.slice(0, limit);
    }
  }
}

/** Path segment, %-encoded (names may hold `/`, topics do). */
export const seg = (s: string): string => encodeURIComponent(s);

/** Reads a line from the terminal without echoing it (raw mode: each key is handled here, not echoed). */
export function promptHidden(prompt: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(prompt);
  stdin.setRawMode(true);
  stdin.setEncoding('utf8');
  stdin.resume();
  return new Promise((resolve, reject) => {
    let pw = '';
    const finish = () => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
    };
    const onData = (chunk: string) => {
      for (const ch of chunk) {
        if (ch === '\r' || ch === '\n' || ch === '\u0004') {
          finish();
          return resolve(pw);
        }
        if (ch === '\u0003') {
          finish();
          return reject(new UsageError('cancelled'));
        }
        if (ch === '\u007f' || ch === '\b') pw = pw.slice(0, -1);
        else pw += ch;
      }
    };
    stdin.on('data', onData);
  });
}

/** The credentials to send: a token wins over a user; neither is an anonymous request. */
export async function resolveAuth(opts: { token?: string; user?: string }, env: NodeJS.ProcessEnv = process.env): Promise<Auth> {
  const token = opts.token ?? (env.FLOWMQ_TOKEN || undefined);
  if (token !== undefined && opts.user === undefined) {
    if (token.trim() === '') throw new UsageError('--token must not be empty');
    return { kind: 'token', token: token.trim() };
  }
  const name = opts.user ?? (env.FLOWMQ_USER || undefined);
  if (name === undefined) return null;
  if (name === '' || name.includes(':')) throw new UsageError('--user must be a non-empty name without ":"');
  const fromEnv = env.FLOWMQ_PASSWORD;
  if (fromEnv !== undefined) return { kind: 'basic', name, password: fromEnv };
  if (!process.stdin.isTTY) {
    throw new UsageError(`--user ${name} needs a password: set FLOWMQ_PASSWORD (there is no terminal to ask on)`);
  }
  return { kind: 'basic', name, password: await promptHidden(`password for ${name}: `) };
}

/** A new password (user add, user passwd): FLOWMQ_NEW_PASSWORD, else asked twice on the terminal. */
export async function newPassword(user: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const fromEnv = env.FLOWMQ_NEW_PASSWORD;
  if (fromEnv !== undefined) {
    if (fromEnv === '') throw new UsageError('FLOWMQ_NEW_PASSWORD is empty');
    return fromEnv;
  }
  if (!process.stdin.isTTY) throw new UsageError(`the new password of ${user} comes from FLOWMQ_NEW_PASSWORD (there is no terminal to ask on)`);
  const a = await promptHidden(`new password for ${user}: `);
  const b = await promptHidden('again: ');
  if (a !== b) throw new UsageError('the two passwords differ');
  if (a === '') throw new UsageError('the password must not be empty');
  return a;
}
