/**
 * Parsers of the config's structured values (config/index.ts's coerce calls them): advertised endpoints, the
 * metastore, the object store and the WAL's shards, and the redaction of URLs that may hold a password.
 */
import { parsePostgresUrl } from '../util/pg-url.js';

/** Where metadata lives: the embedded SQLite file in the data directory, or a PostgreSQL database. */
export type MetastoreSetting = { kind: 'sqlite' } | { kind: 'postgres'; url: string };
/** Where sealed segments live: the data directory, or an S3-compatible bucket under a key prefix. */
export type ObjectStoreSetting = { kind: 'fs' } | { kind: 's3'; bucket: string; prefix: string };

/** `name=host:port,...` (a YAML mapping in a config file): advertised listener addresses. */
export function parseEndpoints(v: unknown, bad: (why: string) => Error): Record<string, { host: string; port: number }> {
  const pairs: Array<[string, unknown]> =
    typeof v === 'string'
      ? v
          .split(',')
          .filter((x) => x.trim() !== '')
          .map((x) => {
            const i = x.indexOf('=');
            if (i <= 0) throw bad('expected name=host:port,...');
            return [x.slice(0, i).trim(), x.slice(i + 1).trim()];
          })
      : v !== null && typeof v === 'object' && !Array.isArray(v)
        ? Object.entries(v as Record<string, unknown>)
        : (() => {
            throw bad('expected name=host:port,...');
          })();
  const out: Record<string, { host: string; port: number }> = {};
  for (const [name, addr] of pairs) {
    const m = typeof addr === 'string' ? /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(addr) : null;
    const port = m ? Number(m[2]) : NaN;
    if (!/^[a-z][a-z0-9-]*$/.test(name) || !m || port < 1 || port > 65535) throw bad(`"${name}=${String(addr)}" is not name=host:port`);
    out[name] = { host: m[1].replace(/^\[|\]$/g, ''), port };
  }
  return out;
}

/** `sqlite`, or a `postgres://` / `postgresql://` URL naming at least a host (and a database: the path). */
export function parseMetastore(v: unknown, bad: (why: string) => Error): MetastoreSetting {
  if (typeof v === 'object' && v !== null && 'kind' in v) return v as MetastoreSetting; // a default or a parsed value
  if (v === 'sqlite') return { kind: 'sqlite' };
  if (typeof v !== 'string') throw bad('expected sqlite or postgres://user:password@host:port/database');
  if (!/^postgres(ql)?:\/\//.test(v)) throw bad('expected sqlite or a postgres:// URL');
  // Several hosts (libpq's postgres://h1:p1,h2:p2/db?target_session_attrs=read-write) are tried in order.
  let hosts: number;
  let first: URL;
  try {
    const parsed = parsePostgresUrl(v);
    hosts = parsed.hosts.length;
    first = new URL(parsed.urls[0]);
  } catch (err) {
    throw bad(`expected sqlite or postgres://user:password@host:port[,host:port...]/database (${(err as Error).message})`);
  }
  if (hosts === 0 && !first.searchParams.has('host')) throw bad('the PostgreSQL URL names no host');
  return { kind: 'postgres', url: v };
}

/** `fs`, or `s3://bucket[/prefix]` with a valid bucket name (3-63 of a-z 0-9 . -). */
export function parseObjectStore(v: unknown, bad: (why: string) => Error): ObjectStoreSetting {
  if (typeof v === 'object' && v !== null && 'kind' in v) return v as ObjectStoreSetting;
  if (v === 'fs') return { kind: 'fs' };
  if (typeof v !== 'string') throw bad('expected fs or s3://bucket/prefix');
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(v);
  if (!m) throw bad('expected fs or s3://bucket/prefix');
  const bucket = m[1];
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) throw bad(`"${bucket}" is not a valid S3 bucket name`);
  const prefix = (m[2] ?? '').replace(/^\/+|\/+$/g, '');
  if (prefix.split('/').some((part) => part === '.' || part === '..')) throw bad('the S3 prefix must not hold . or .. levels');
  return { kind: 's3', bucket, prefix };
}

/** A URL with its password masked, for logs and error messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    // Not a URL at all: whatever follows a colon and precedes an @ may be a password.
    return url.replace(/:[^:@/]*@/, ':***@');
  }
}

/**
 * `--wal-shard`: PostgreSQL URLs, each a WAL shard. The flag repeats; one value (an environment variable) may hold
 * several separated by commas or spaces. A comma splits only before another `postgres://`, since a multi-host URL
 * (`postgres://h1:5432,h2:5432/db`) holds commas of its own. A YAML list works in a config file.
 */
export function parseWalShards(v: unknown, bad: (why: string) => Error): string[] {
  const items = Array.isArray(v) ? v : [v];
  const out: string[] = [];
  for (const item of items) {
    if (typeof item !== 'string') throw bad('expected postgres:// URLs');
    for (const part of item.split(/\s+|,(?=\s*postgres(?:ql)?:\/\/)/)) {
      const url = part.trim();
      if (url === '') continue;
      const parsed = parseMetastore(url, (why) => bad(why.replace('expected sqlite or ', 'expected ')));
      if (parsed.kind !== 'postgres') throw bad('expected a postgres:// URL');
      out.push(url);
    }
  }
  return out;
}
