/**
 * Shared pieces of the admin API tests: a control plane over a memory store (the real Directory, PasswordGuard and
 * AccessControl), an engine over memory storage, and one HTTP request with exactly the headers given.
 */
import { request } from 'node:http';
import { pino, type Logger } from 'pino';
import { Engine } from '../../src/core/index.js';
import { startAdminApi, type AdminApi, type AdminApiOptions } from '../../src/control/admin-api.js';
import type { PasswordGuardOptions } from '../../src/control/password-guard.js';
import type { ControlStore } from '../../src/storage/metastore/control-store.js';
import { testControl, type TestControl } from '../helpers/control.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: { error?: { code: string; message: string } } & Record<string, unknown>;
  text: string;
}

export type Plane = TestControl;

/** The real control plane over a memory store, with users; the guard as the broker's (failures slowed). */
export async function controlPlane(
  users: Array<{ username: string; password: string; groups?: string[] }> = [],
  opts: { store?: ControlStore; guard?: PasswordGuardOptions } = {},
): Promise<Plane> {
  return testControl({ users, store: opts.store, guard: opts.guard ?? {} });
}

export async function engineWith(...streams: string[]): Promise<Engine> {
  const m = new MemoryStreams();
  const engine = new Engine(m, m);
  for (const name of streams) await engine.createStream({ name, partitions: 1 });
  return engine;
}

export function logCapture(): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { logger, lines };
}

/** Starts the API on a free loopback port with a silent logger unless given. */
export function startApi(opts: Partial<AdminApiOptions> & Pick<AdminApiOptions, 'engine' | 'access'>): Promise<AdminApi> {
  return startAdminApi({ logger: pino({ level: 'silent' }), host: '127.0.0.1', port: 0, dashboard: null, ...opts });
}

export const JSON_TYPE = { 'content-type': 'application/json' };

export function basic(user: string, password: string): Record<string, string> {
  return { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` };
}

/** One HTTP request with exactly the headers given (node's http client lets the Host header be anything). */
export function call(
  api: AdminApi,
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: unknown; auth?: [string, string] } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { host: `127.0.0.1:${api.address().port}`, ...opts.headers };
  if (opts.auth) Object.assign(headers, basic(opts.auth[0], opts.auth[1]));
  const body = opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  if (body !== undefined && headers['content-type'] === undefined && typeof opts.body !== 'string') headers['content-type'] = 'application/json';
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: api.address().port, method, path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let parsed: Reply['body'] = {};
        try {
          parsed = text ? (JSON.parse(text) as Reply['body']) : {};
        } catch {
          // not JSON (metrics text)
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parsed, text });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}
