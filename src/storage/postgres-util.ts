/**
 * What the PostgreSQL backends (metastore/postgres.ts, wal/postgres-wal.ts) share: a node-postgres pool set up
 * the same way, the mapping of PostgreSQL failures to FlowErrors, migrations run once under an advisory lock,
 * and a per-key serializer.
 */
import type { Logger } from 'pino';
import pg from 'pg';
import { FlowError } from '../core/index.js';
import { endpointsOf, parsePostgresUrl, type ParsedPostgresUrl, type TargetSessionAttrs } from '../util/pg-url.js';

export interface PostgresOptions {
  /** postgres://user:password@host:port/database */
  url: string;
  /** Connections in the pool (default 10). */
  poolSize?: number;
  /** statement_timeout of every connection, ms (default 10 000; 0 disables it). */
  statementTimeoutMs?: number;
  /** How long to wait for a connection, ms (default 5000). */
  connectTimeoutMs?: number;
  logger?: Logger;
}

/** SQLSTATEs raised by FlowMQ's own functions (see the migrations); class "FM" is not used by PostgreSQL. */
export const SQLSTATE_FENCED = 'FMF01';
export const SQLSTATE_INVALID = 'FMI01';
export const SQLSTATE_NOT_FOUND = 'FMN01';

/**
 * The URL without its `options` parameter (startup options such as `-c search_path=...`), and those options.
 * node-postgres lets the URL's parameters override the pool's config, so options left in the URL would replace
 * the ones FlowMQ sets (synchronous_commit); they are merged instead.
 */
function splitOptions(url: string): { connectionString: string; options: string } {
  try {
    const u = new URL(url);
    const options = u.searchParams.get('options') ?? '';
    if (options === '') return { connectionString: url, options };
    u.searchParams.delete('options');
    return { connectionString: u.toString(), options };
  } catch {
    return { connectionString: url, options: '' };
  }
}

/**
 * int8 (bigint) columns and aggregates (COUNT, SUM) come back as numbers. Every int8 FlowMQ stores is a safe
 * integer (the backends check what they write), so a value outside that range means a foreign writer or
 * corruption: the query fails with it rather than returning a rounded offset.
 */
function parseInt8(text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new FlowError('CORRUPT_DATA', `PostgreSQL returned ${text}, beyond the safe integer range`);
  return n;
}

const INT8_OID = 20;
const NUMERIC_OID = 1700;
/** Per-pool type parsers, so the process-wide defaults of node-postgres stay as they are for anyone else. */
const typeParsers = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID && format !== 'binary') return parseInt8;
    // SUM(bigint) is numeric: same rule.
    if (oid === NUMERIC_OID && format !== 'binary') return parseInt8;
    return pg.types.getTypeParser(oid, format as 'text') as (value: string) => unknown;
  },
} as pg.CustomTypesConfig;

/** A node-postgres error carries the SQLSTATE in `code`; a socket error carries an errno name there. */
function errCode(err: unknown): string | undefined {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : undefined;
}

/** Whether the error means the connection (not the statement) failed: the server is down, restarting or gone. */
export function isConnectionError(err: unknown): boolean {
  const code = errCode(err);
  if (code === undefined) {
    // node-postgres reports a socket closed under a query with a plain Error.
    const msg = err instanceof Error ? err.message : '';
    return /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(msg);
  }
  return (
    code.startsWith('08') || // connection exception
    code === '57P01' || // admin_shutdown (the server is stopping)
    code === '57P02' || // crash_shutdown
    code === '57P03' || // cannot_connect_now (starting up or shutting down)
    ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH'].includes(code)
  );
}

/**
 * Turns a failure into a FlowError. FlowMQ's own SQLSTATEs become FENCED / INVALID_ARGUMENT / NOT_FOUND; a
 * foreign-key violation means the stream named is absent (NOT_FOUND); a full disk is STORAGE_FULL; everything
 * else (the server unreachable or restarting, a statement timeout) is STORAGE_ERROR, which the callers treat as
 * retriable: the pool connects again by itself once the server is back.
 */
export function pgError(what: string, err: unknown, endpoint: string): FlowError {
  if (err instanceof FlowError) return err;
  const code = errCode(err);
  const msg = err instanceof Error ? err.message : String(err);
  switch (code) {
    case SQLSTATE_FENCED:
      return new FlowError('FENCED', msg, { cause: err });
    case SQLSTATE_INVALID:
      return new FlowError('INVALID_ARGUMENT', msg, { cause: err });
    case SQLSTATE_NOT_FOUND:
      return new FlowError('NOT_FOUND', msg, { cause: err });
    case '23503': // foreign_key_violation: every foreign key refers to streams(name)
      return new FlowError('NOT_FOUND', `${what}: stream not found`, { cause: err });
    case '53100': // disk_full
      return new FlowError('STORAGE_FULL', `${what}: PostgreSQL ${endpoint}: ${msg}`, { cause: err });
    case '57014': // query_canceled: statement_timeout
      return new FlowError('STORAGE_ERROR', `${what}: PostgreSQL ${endpoint}: statement timed out (${msg})`, { cause: err });
    default:
      if (isConnectionError(err)) {
        return new FlowError('STORAGE_ERROR', `${what}: PostgreSQL ${endpoint} unreachable (retriable): ${msg || code}`, { cause: err });
      }
      return new FlowError('STORAGE_ERROR', `${what}: PostgreSQL ${endpoint}: ${msg}`, { cause: err });
  }
}

/** Counters of a pool, for figures(). */
export interface PoolStats {
  queries: number;
  errors: number;
  /** Connections opened after a connection was lost (the server restarted or was unreachable). */
  reconnects: number;
  /** Idle connections that died (the pool's 'error' event). */
  idleErrors: number;
  /** Times the pool's connections were discarded to find the read-write server again (multi-host URLs). */
  failovers: number;
}

export interface PgPool {
  /** The node-postgres pool in use now (null while a multi-host URL's read-write server is being looked for). */
  readonly pool: pg.Pool | null;
  stats: PoolStats;
  /** host:port of the URL (every host of a multi-host URL), for messages. */
  endpoint: string;
  /** Runs one statement; failures become FlowErrors (see pgError). */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(what: string, text: string | pg.QueryConfig, values?: unknown[]): Promise<pg.QueryResult<R>>;
  /** Runs `fn` in a transaction on one connection; a failure rolls it back (the connection is discarded). */
  transaction<T>(what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T>;
  /** A connection of the pool, checked out (release it); failures are node-postgres's own errors. */
  connect(): Promise<pg.PoolClient>;
  /** Marks a failure: a connection-level one makes the next connection count as a reconnect (and, with a
   * multi-host URL, a failure of the pool `on` discards its connections). */
  noteError(err: unknown, on?: pg.Pool | null): void;
  poolFigures(): Record<string, number>;
  end(): Promise<void>;
}

/** SQLSTATE read_only_sql_transaction: the server is (or became) a standby, or a primary being demoted. */
const SQLSTATE_READ_ONLY = '25006';

/** Whether, with a multi-host URL, the error means the server may no longer be the read-write one. */
function isFailoverError(err: unknown): boolean {
  return errCode(err) === SQLSTATE_READ_ONLY || isConnectionError(err);
}

/**
 * Whether a connected session is one `target_session_attrs` accepts, as libpq checks it: read-write is
 * `transaction_read_only` off, primary is `pg_is_in_recovery()` false. Returns why not, or null.
 */
async function sessionRefused(c: pg.ClientBase, attrs: TargetSessionAttrs): Promise<string | null> {
  if (attrs === 'any') return null;
  const r = await c.query<{ recovery: boolean; ro: string }>("SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') AS ro");
  const row = r.rows[0];
  if (attrs === 'read-write' && row.ro !== 'off') return row.recovery ? 'a standby (read-only)' : 'read-only';
  if (attrs === 'primary' && row.recovery) return 'a standby';
  return null;
}

/** The error thrown when no host of a URL is the server wanted: a connection error (SQLSTATE class 08), retriable. */
function noServerError(attrs: TargetSessionAttrs, endpoint: string, why: string[]): Error {
  const want = attrs === 'any' ? 'reachable' : attrs;
  return Object.assign(new Error(`no ${want} PostgreSQL server among ${endpoint} (${why.join('; ')})`), { code: '08001' });
}

/**
 * Opens one client on the first host of the URL, in order, that accepts a connection and is of the kind
 * `target_session_attrs` asks for (libpq's behaviour for multi-host URLs). For connections outside a pool (LISTEN).
 */
export async function connectClient(url: string, config: Omit<pg.ClientConfig, 'connectionString'> = {}): Promise<pg.Client> {
  const parsed = parsePostgresUrl(url);
  const why: string[] = [];
  for (let i = 0; i < parsed.urls.length; i++) {
    const c = new pg.Client({ connectionTimeoutMillis: 5000, ...config, connectionString: parsed.urls[i] });
    const swallow = (): void => undefined;
    c.on('error', swallow); // an error before the caller has its own listener
    try {
      await c.connect();
      const refused = await sessionRefused(c, parsed.targetSessionAttrs);
      if (refused === null) {
        c.removeListener('error', swallow);
        return c;
      }
      why.push(`${hostName(parsed, i)}: ${refused}`);
    } catch (err) {
      why.push(`${hostName(parsed, i)}: ${err instanceof Error ? err.message || errCode(err) : String(err)}`);
    }
    await c.end().catch(() => undefined);
  }
  throw noServerError(parsed.targetSessionAttrs, endpointsOf(url), why);
}

function hostName(parsed: ParsedPostgresUrl, i: number): string {
  const h = parsed.hosts[i];
  return h ? `${h.host}:${h.port}` : 'localhost';
}

/**
 * A pool over the URL's server. With one host (and no target_session_attrs) it is one node-postgres pool that
 * reconnects by itself. With several hosts (or target_session_attrs=read-write/primary), libpq's behaviour: the
 * hosts are tried in order and the pool is opened on the first one that is read-write (every new connection is
 * checked again); after a connection error or a read-only error (SQLSTATE 25006) its connections are discarded and
 * the next statement looks for the read-write server again, so brokers follow a failover of a highly available
 * PostgreSQL (pg_auto_failover, Patroni). Statements in flight on the lost server fail to their callers
 * (STORAGE_ERROR, retriable), as they do when a single server restarts: nothing is acknowledged that was not committed.
 */
export function createPool(opts: PostgresOptions, role: string): PgPool {
  const parsed = parsePostgresUrl(opts.url);
  const endpoint = endpointsOf(opts.url);
  const attrs = parsed.targetSessionAttrs;
  const multi = parsed.urls.length > 1 || attrs !== 'any';
  const stats: PoolStats = { queries: 0, errors: 0, reconnects: 0, idleErrors: 0, failovers: 0 };
  const timeout = opts.statementTimeoutMs ?? 10_000;
  const connectTimeout = opts.connectTimeoutMs ?? 5000;
  let lost = false;
  let current: pg.Pool | null = null;
  let currentHost = '';
  let locating: Promise<pg.Pool> | null = null;
  let ended = false;

  const open = (url: string, host: string): pg.Pool => {
    const { connectionString, options } = splitOptions(url);
    const pool = new pg.Pool({
      connectionString,
      max: opts.poolSize ?? 10,
      connectionTimeoutMillis: connectTimeout,
      idleTimeoutMillis: 30_000,
      // Sent as startup parameters: every connection gets them, including those opened after a restart.
      statement_timeout: timeout > 0 ? timeout : undefined,
      // Acknowledgements wait for COMMIT; a server configured with synchronous_commit=off would make that a lie.
      // Options given in the URL (`?options=-c search_path=broker1`, a schema of its own) are kept.
      options: [options, '-c synchronous_commit=on'].filter((o) => o !== '').join(' '),
      application_name: `flowmq-${role}`,
      keepAlive: true,
      types: typeParsers,
    });
    // A multi-host pool checks every new connection: the server may have been demoted since it was chosen.
    // (pg-pool awaits the hook's promise and fails the checkout with its error; @types/pg types it as void.)
    if (multi) {
      (pool.options as { onConnect?: (c: pg.ClientBase) => Promise<void> }).onConnect = async (c) => {
        const refused = await sessionRefused(c, attrs);
        if (refused !== null) throw Object.assign(new Error(`PostgreSQL ${host} is ${refused} now`), { code: SQLSTATE_READ_ONLY });
      };
    }
    // An idle connection whose server restarts emits 'error' on the pool: without a listener that is an uncaught
    // exception that ends the broker. The pool discards the connection and opens a new one when next needed.
    pool.on('error', (err) => {
      stats.idleErrors++;
      lost = true;
      opts.logger?.warn({ err, endpoint: host, role }, 'PostgreSQL connection lost while idle; the pool reconnects on demand');
      discard(pool, err);
    });
    pool.on('connect', () => {
      if (lost) {
        lost = false;
        stats.reconnects++;
        opts.logger?.info({ endpoint: host, role }, 'PostgreSQL connection re-established');
      }
    });
    return pool;
  };

  /** Multi-host: drops the pool's connections (those checked out when they are released) after a failure on it. */
  const discard = (pool: pg.Pool, err: unknown): void => {
    if (!multi || current !== pool || !isFailoverError(err)) return;
    current = null;
    stats.failovers++;
    opts.logger?.warn({ err, endpoint: currentHost, role }, 'PostgreSQL: the read-write server was lost; looking for it again among every host');
    pool.end().catch(() => undefined);
  };

  /** Multi-host: the first host, in the URL's order, that accepts a connection of the kind wanted. */
  const locate = async (): Promise<pg.Pool> => {
    const why: string[] = [];
    for (let i = 0; i < parsed.urls.length; i++) {
      const host = hostName(parsed, i);
      const c = new pg.Client({
        connectionString: splitOptions(parsed.urls[i]).connectionString,
        connectionTimeoutMillis: connectTimeout,
        application_name: `flowmq-${role}`,
      });
      c.on('error', () => undefined);
      let refused: string | null;
      try {
        await c.connect();
        refused = await sessionRefused(c, attrs);
      } catch (err) {
        refused = err instanceof Error ? err.message || errCode(err) || 'failed' : String(err);
      } finally {
        await c.end().catch(() => undefined);
      }
      if (refused !== null) {
        why.push(`${host}: ${refused}`);
        continue;
      }
      if (ended) break;
      const previous = currentHost;
      currentHost = host;
      current = open(parsed.urls[i], host);
      if (previous !== '' && previous !== host) opts.logger?.warn({ from: previous, to: host, role }, 'PostgreSQL: the read-write server changed');
      else if (previous !== '') opts.logger?.info({ endpoint: host, role }, 'PostgreSQL: the read-write server is back');
      return current;
    }
    throw noServerError(attrs, endpoint, ended ? ['the pool was closed'] : why);
  };

  const acquire = async (): Promise<pg.Pool> => {
    if (current) return current;
    if (ended) throw new Error('Cannot use a pool after calling end on the pool');
    locating ??= locate().finally(() => {
      locating = null;
    });
    return locating;
  };

  if (!multi) {
    currentHost = endpoint;
    current = open(parsed.urls[0], endpoint);
  }

  const noteError = (err: unknown, on?: pg.Pool | null): void => {
    stats.errors++;
    if (isConnectionError(err)) lost = true;
    if (on) discard(on, err);
  };
  return {
    get pool() {
      return current;
    },
    stats,
    endpoint,
    noteError,
    async query<R extends pg.QueryResultRow>(what: string, text: string | pg.QueryConfig, values?: unknown[]) {
      stats.queries++;
      let pool: pg.Pool | null = null;
      try {
        pool = await acquire();
        return await (typeof text === 'string' ? pool.query<R>(text, values) : pool.query<R>({ ...text, values: values ?? text.values }));
      } catch (err) {
        noteError(err, pool);
        throw pgError(what, err, endpoint);
      }
    },
    async connect(): Promise<pg.PoolClient> {
      let pool: pg.Pool | null = null;
      try {
        pool = await acquire();
        return await pool.connect();
      } catch (err) {
        noteError(err, pool);
        throw err;
      }
    },
    async transaction<T>(what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
      let pool: pg.Pool | null = null;
      let client: pg.PoolClient;
      try {
        pool = await acquire();
        client = await pool.connect();
      } catch (err) {
        noteError(err, pool);
        throw pgError(what, err, endpoint);
      }
      // The pool stops listening for a connection's errors while it is checked out: one that dies between two
      // statements of the transaction (the server restarting) would emit an unhandled 'error' and end the process.
      const onError = (err: Error): void => noteError(err, pool);
      client.on('error', onError);
      try {
        stats.queries++;
        await client.query('BEGIN');
        const result = await fn(client);
        stats.queries++;
        await client.query('COMMIT');
        client.removeListener('error', onError);
        client.release();
        return result;
      } catch (err) {
        // Destroying the connection rolls the transaction back on the server; a half-done one is never reused.
        client.removeListener('error', onError);
        client.on('error', () => undefined); // a late error of the discarded connection
        client.release(true);
        if (!(err instanceof FlowError)) noteError(err, pool);
        else if (err.cause !== undefined) discard(pool, err.cause);
        throw pgError(what, err, endpoint);
      }
    },
    poolFigures() {
      return {
        poolSize: current?.totalCount ?? 0,
        poolIdle: current?.idleCount ?? 0,
        poolWaiting: current?.waitingCount ?? 0,
        queries: stats.queries,
        errors: stats.errors,
        reconnects: stats.reconnects,
        idleErrors: stats.idleErrors,
        failovers: stats.failovers,
      };
    },
    async end() {
      ended = true;
      await locating?.catch(() => undefined);
      const pool = current;
      current = null;
      if (pool) await pool.end();
    },
  };
}

/**
 * Opens a pool and checks the server answers, so a broker started against an unreachable server fails at start
 * with one clear line naming it.
 */
export async function connectPool(opts: PostgresOptions, role: string): Promise<PgPool> {
  const p = createPool(opts, role);
  try {
    const c = await p.connect();
    try {
      await c.query('SELECT 1');
    } finally {
      c.release();
    }
  } catch (err) {
    await p.end().catch(() => undefined);
    const cause = err instanceof Error ? err.message || errCode(err) || String(err) : String(err);
    throw new FlowError('STORAGE_ERROR', `cannot reach PostgreSQL at ${p.endpoint}: ${cause}`, { cause: err });
  }
  return p;
}

export interface PgMigration {
  version: number;
  name: string;
  sql: string;
}

/** Advisory-lock key shared by every FlowMQ migration list of a database ("FlowMQ" in ASCII). */
const MIGRATION_LOCK = 0x466c6f774d51;

/**
 * Applies the pending migrations of `list`, recorded in `table`, on a connection of its own, under a
 * session-level advisory lock: brokers starting together on one database migrate it once (the second waits for
 * the lock, then finds nothing left to do). All pending migrations run in one transaction. Returns how many
 * were applied.
 */
export async function migratePostgres(p: PgPool, list: readonly PgMigration[], table: string, what: string): Promise<number> {
  list.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`${what} migration list out of order at ${m.name}`);
  });
  let client: pg.PoolClient;
  try {
    client = await p.connect();
  } catch (err) {
    throw pgError(`${what} migration`, err, p.endpoint);
  }
  let ok = false;
  // Checked out, the connection's errors are ours to handle (see PgPool.transaction); it is discarded at the end.
  client.on('error', (err) => p.noteError(err));
  try {
    // Waiting for another broker's migration can take longer than an ordinary statement may, but not for ever.
    await client.query("SET statement_timeout = '5min'");
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    try {
      await client.query('BEGIN');
      await client.query(`CREATE TABLE IF NOT EXISTS ${table} (
        version    integer PRIMARY KEY,
        name       text    NOT NULL,
        applied_at bigint  NOT NULL
      )`);
      const r = await client.query<{ v: number | null }>(`SELECT MAX(version) AS v FROM ${table}`);
      const current = r.rows[0].v ?? 0;
      if (current > list.length) {
        throw new FlowError(
          'STORAGE_ERROR',
          `${what} schema version ${current} at ${p.endpoint} is newer than this FlowMQ knows (${list.length}); upgrade FlowMQ or use another database`,
        );
      }
      const pending = list.slice(current);
      for (const m of pending) {
        await client.query(m.sql);
        await client.query(`INSERT INTO ${table} (version, name, applied_at) VALUES ($1, $2, $3)`, [m.version, m.name, Date.now()]);
      }
      await client.query('COMMIT');
      ok = true;
      return pending.length;
    } finally {
      if (!ok) await client.query('ROLLBACK').catch(() => undefined);
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    }
  } catch (err) {
    throw pgError(`${what} migration`, err, p.endpoint);
  } finally {
    // The session had its statement_timeout changed: never hand it to anyone else.
    client.release(true);
  }
}

/**
 * Per-key order over a pool: calls on one key run one after another, in the order they were made (each starts
 * once the previous one settled, whatever its outcome), while calls on different keys run in parallel on the
 * pool's connections. A key's chain is dropped as soon as it is idle, so memory follows the keys in use.
 * Keys belong to a category (a client id, a topic, ...): `settled(category)` waits for every call of that
 * category issued so far, for the reads that span all keys (listRetained after an unawaited putRetained).
 */
export class KeyedSerializer {
  private readonly tails = new Map<string, Map<string, Promise<void>>>();

  run<T>(category: string, key: string, fn: () => Promise<T>): Promise<T> {
    let cat = this.tails.get(category);
    if (!cat) this.tails.set(category, (cat = new Map<string, Promise<void>>()));
    const prev = cat.get(key);
    const result = prev ? prev.then(fn) : fn();
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    cat.set(key, tail);
    void tail.then(() => {
      const c = this.tails.get(category);
      if (c?.get(key) === tail) {
        c.delete(key);
        if (c.size === 0) this.tails.delete(category);
      }
    });
    return result;
  }

  /** Resolves once every call of `category` issued before this one has settled. */
  async settled(category: string): Promise<void> {
    const cat = this.tails.get(category);
    if (cat) await Promise.all([...cat.values()]);
  }

  /** Resolves once every call issued before this one has settled. */
  async idle(): Promise<void> {
    const all: Promise<void>[] = [];
    for (const cat of this.tails.values()) all.push(...cat.values());
    await Promise.all(all);
  }

  /** Keys with calls in flight or queued. */
  get activeKeys(): number {
    let n = 0;
    for (const cat of this.tails.values()) n += cat.size;
    return n;
  }
}
