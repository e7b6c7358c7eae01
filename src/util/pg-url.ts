/**
 * PostgreSQL connection URLs with several hosts, as libpq reads them
 * (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-MULTIPLE-HOSTS):
 * `postgres://user:password@host1:port1,host2:port2/database?target_session_attrs=read-write`.
 * node-postgres takes one host per connection, so a multi-host URL is split here into one single-host URL per host
 * (every other part kept as written), and the storage layer tries them in order (src/storage/postgres-util.ts).
 * Shared by the config (which checks a --metastore URL) and the storage layer (which connects).
 */

/** The `target_session_attrs` values FlowMQ accepts: it writes, so a standby is never what it wants. */
export type TargetSessionAttrs = 'any' | 'read-write' | 'primary';

export interface PgHost {
  host: string;
  port: number;
}

export interface ParsedPostgresUrl {
  hosts: PgHost[];
  /**
   * As given in the URL; when absent, `read-write` for a URL of several hosts (FlowMQ writes: a standby is never
   * the server it wants) and `any` for one host (no check, as before).
   */
  targetSessionAttrs: TargetSessionAttrs;
  /** One URL per host, in the URL's order, without `target_session_attrs` (node-postgres does not know it). */
  urls: string[];
}

const URL_RE = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/s;

/** Throws an Error naming what is wrong. A URL without hosts (`?host=/socket/dir`) keeps one entry, as written. */
export function parsePostgresUrl(url: string): ParsedPostgresUrl {
  const m = URL_RE.exec(url);
  if (!m) throw new Error('expected postgres://user:password@host:port/database');
  const [, scheme, userinfo = '', authority, rest] = m;
  const hosts: PgHost[] = [];
  const parts = authority === '' ? [] : authority.split(',');
  for (const part of parts) {
    const hm = /^(\[[^\]]*\]|[^:[\]]*)(?::(\d*))?$/.exec(part);
    if (!hm || hm[1] === '' || hm[1] === '[]') throw new Error(`"${part}" is not host or host:port`);
    const port = hm[2] === undefined || hm[2] === '' ? 5432 : Number(hm[2]);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`"${part}": the port must be 1-65535`);
    hosts.push({ host: hm[1], port });
  }
  // The query string, with target_session_attrs taken out.
  const q = rest.indexOf('?');
  const path = q < 0 ? rest : rest.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : rest.slice(q + 1));
  const given = params.get('target_session_attrs');
  params.delete('target_session_attrs');
  let targetSessionAttrs: TargetSessionAttrs;
  if (given === null) targetSessionAttrs = hosts.length > 1 ? 'read-write' : 'any';
  else if (given === 'any' || given === 'read-write' || given === 'primary') targetSessionAttrs = given;
  else throw new Error(`target_session_attrs=${given}: FlowMQ writes, so it takes only any, read-write or primary`);
  const query = params.toString();
  const tail = path + (query === '' ? '' : `?${query}`);
  const one = (h: PgHost | null): string => `${scheme}${userinfo}${h ? `${h.host}${parts.length > 0 ? `:${h.port}` : ''}` : ''}${tail}`;
  // One host and no target_session_attrs: the URL exactly as written (what node-postgres always took).
  const urls = given === null && hosts.length <= 1 ? [url] : hosts.length === 0 ? [one(null)] : hosts.map(one);
  // Each single-host URL must be one the WHATWG parser (node-postgres's) takes.
  for (const u of urls) {
    try {
      new URL(u);
    } catch {
      throw new Error('expected postgres://user:password@host:port/database');
    }
  }
  return { hosts, targetSessionAttrs, urls };
}

/** host:port[,host:port...] of a URL, for messages (never the password). */
export function endpointsOf(url: string): string {
  try {
    const p = parsePostgresUrl(url);
    if (p.hosts.length > 0) return p.hosts.map((h) => `${h.host}:${h.port}`).join(',');
    const u = new URL(p.urls[0]);
    return `${u.searchParams.get('host') ?? 'localhost'}:${u.searchParams.get('port') ?? '5432'}`;
  } catch {
    return 'the PostgreSQL server';
  }
}
