/**
 * The cluster's membership and ownership tables in PostgreSQL: the metastore's database, so that the other stores
 * (metastore, queue store) can fence a write by the owner row in the same statement (`flowmq_owner_check`).
 *
 * - Leases are timestamps of the database's clock (clock_timestamp()): brokers never compare their own clocks.
 * - A claim is one statement: it takes the row only when its owner is released, unregistered, dead, or of another
 *   incarnation, and only while the claimant's own lease is live; concurrent claims of one row serialize on the row
 *   lock, so exactly one wins per change of hands, with the epoch bumped.
 * - `flowmq_owner_check(kind, name, epoch)` raises SQLSTATE FMF01 (FlowError FENCED) unless the row holds that
 *   epoch. It takes the row FOR SHARE, so a claim waits for the write that passed the check to commit: the new owner,
 *   which loads state after its claim, sees every write the old owner made, and the old owner can make none after.
 * - LISTEN/NOTIFY on a dedicated connection (a pool's connections come and go): after it is (re)established every
 *   listener is called with "*": notifications may have been missed meanwhile, reload everything.
 */
import type { Logger } from 'pino';
import pg from 'pg';
import { FlowError } from '../core/index.js';
import { connectClient, connectPool, migratePostgres, type PgMigration, type PgPool, type PostgresOptions } from '../storage/postgres-util.js';
import type { BrokerInfo, BrokerState, ClusterStore, OwnerRecord, ResourceKind } from './types.js';

const MIGRATIONS: PgMigration[] = [
  {
    version: 1,
    name: 'membership and ownership',
    sql: `
      CREATE TABLE cluster_brokers (
        id          integer     NOT NULL PRIMARY KEY,
        incarnation text        NOT NULL,
        info        text        NOT NULL,  -- JSON BrokerInfo
        lease_until timestamptz NOT NULL,
        leaving     boolean     NOT NULL DEFAULT false
      );
      CREATE TABLE cluster_owners (
        kind        text COLLATE "C" NOT NULL,
        name        text COLLATE "C" NOT NULL,
        owner       integer,
        incarnation text,
        epoch       bigint NOT NULL,
        since       bigint NOT NULL,
        PRIMARY KEY (kind, name)
      );
      CREATE INDEX cluster_owners_by_owner ON cluster_owners (kind, owner);
      CREATE FUNCTION flowmq_owner_check(k text, n text, e bigint) RETURNS void LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM 1 FROM cluster_owners WHERE kind = k AND name = n AND epoch = e FOR SHARE;
        IF NOT FOUND THEN
          RAISE EXCEPTION 'the % % is owned by another broker now (epoch % is fenced)', k, n, e USING ERRCODE = 'FMF01';
        END IF;
      END $$;
    `,
  },
];

/** Rows of brokers dead this long are removed (owner rows naming them are orphans either way). */
const PRUNE_AFTER = "interval '10 minutes'";

const LIVE_OWNER = `EXISTS (SELECT 1 FROM cluster_brokers b WHERE b.id = o.owner AND b.incarnation = o.incarnation AND b.lease_until > clock_timestamp())`;

interface OwnerRow extends Record<string, unknown> {
  kind: ResourceKind;
  name: string;
  owner: number | null;
  incarnation: string | null;
  epoch: string | number;
  since: string | number;
}

function toOwner(r: OwnerRow): OwnerRecord {
  return { kind: r.kind, name: r.name, owner: r.owner, incarnation: r.incarnation, epoch: Number(r.epoch), since: Number(r.since) };
}

const OWNER_COLUMNS = 'kind, name, owner, incarnation, epoch, since';

export class PostgresClusterStore implements ClusterStore {
  readonly kind = 'postgres';
  private listener: pg.Client | null = null;
  private readonly topics = new Map<string, Array<(payload: string) => void>>();
  private closed = false;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private listenerConnecting: Promise<void> | null = null;

  private constructor(
    private readonly db: PgPool,
    private readonly opts: PostgresOptions,
    private readonly logger: Logger | undefined,
  ) {}

  static async open(opts: PostgresOptions): Promise<PostgresClusterStore> {
    const db = await connectPool({ ...opts, poolSize: Math.min(opts.poolSize ?? 4, 4) }, 'cluster');
    try {
      await migratePostgres(db, MIGRATIONS, 'cluster_migrations', 'cluster');
    } catch (err) {
      await db.end().catch(() => undefined);
      throw err;
    }
    return new PostgresClusterStore(db, opts, opts.logger);
  }

  async register(info: BrokerInfo, leaseMs: number): Promise<void> {
    await this.db.query('cluster prune', `DELETE FROM cluster_brokers WHERE lease_until < clock_timestamp() - ${PRUNE_AFTER}`);
    const r = await this.db.query(
      'cluster register',
      `INSERT INTO cluster_brokers AS b (id, incarnation, info, lease_until, leaving)
         VALUES ($1, $2, $3, clock_timestamp() + $4 * interval '1 millisecond', false)
       ON CONFLICT (id) DO UPDATE SET incarnation = EXCLUDED.incarnation, info = EXCLUDED.info,
         lease_until = EXCLUDED.lease_until, leaving = false
       WHERE b.incarnation = EXCLUDED.incarnation OR b.lease_until <= clock_timestamp()
       RETURNING id`,
      [info.id, info.incarnation, JSON.stringify(info), leaseMs],
    );
    if (r.rowCount === 0) {
      const holder = (await this.brokers()).find((b) => b.id === info.id);
      const where = holder?.endpoints.cluster ? ` (${holder.endpoints.cluster.host}:${holder.endpoints.cluster.port})` : '';
      throw new FlowError('CONFIG_ERROR', `broker id ${info.id} is held by a live broker${where}: give every broker of the cluster its own --broker-id`);
    }
  }

  async heartbeat(id: number, incarnation: string, leaseMs: number): Promise<boolean> {
    const r = await this.db.query(
      'cluster heartbeat',
      `UPDATE cluster_brokers SET lease_until = clock_timestamp() + $3 * interval '1 millisecond'
       WHERE id = $1 AND incarnation = $2 AND lease_until > clock_timestamp() RETURNING id`,
      [id, incarnation, leaseMs],
    );
    return r.rowCount === 1;
  }

  async setLeaving(id: number, incarnation: string): Promise<void> {
    await this.db.query('cluster leaving', 'UPDATE cluster_brokers SET leaving = true WHERE id = $1 AND incarnation = $2', [id, incarnation]);
  }

  async deregister(id: number, incarnation: string): Promise<void> {
    await this.db.query('cluster deregister', 'DELETE FROM cluster_brokers WHERE id = $1 AND incarnation = $2', [id, incarnation]);
  }

  async brokers(): Promise<BrokerState[]> {
    const r = await this.db.query<{ info: string; leaving: boolean; alive: boolean; remaining: number }>(
      'cluster brokers',
      `SELECT info, leaving, lease_until > clock_timestamp() AS alive,
              (extract(epoch FROM lease_until - clock_timestamp()) * 1000)::float8 AS remaining
       FROM cluster_brokers ORDER BY id`,
    );
    return r.rows.map((row) => ({
      ...(JSON.parse(row.info) as BrokerInfo),
      alive: row.alive,
      leaving: row.leaving,
      leaseRemainingMs: Math.round(Number(row.remaining)),
    }));
  }

  async owners(kind: ResourceKind): Promise<OwnerRecord[]> {
    const r = await this.db.query<OwnerRow>('cluster owners', `SELECT ${OWNER_COLUMNS} FROM cluster_owners WHERE kind = $1`, [kind]);
    return r.rows.map(toOwner);
  }

  async orphans(kind: ResourceKind, limit: number): Promise<OwnerRecord[]> {
    const r = await this.db.query<OwnerRow>(
      'cluster orphans',
      `SELECT ${OWNER_COLUMNS} FROM cluster_owners o WHERE kind = $1 AND (owner IS NULL OR NOT ${LIVE_OWNER}) LIMIT $2`,
      [kind, limit],
    );
    return r.rows.map(toOwner);
  }

  async owner(kind: ResourceKind, name: string): Promise<OwnerRecord | null> {
    const r = await this.db.query<OwnerRow>('cluster owner', `SELECT ${OWNER_COLUMNS} FROM cluster_owners WHERE kind = $1 AND name = $2`, [kind, name]);
    return r.rows.length === 0 ? null : toOwner(r.rows[0]);
  }

  async claim(kind: ResourceKind, name: string, id: number, incarnation: string, opts: { force?: boolean } = {}): Promise<OwnerRecord> {
    // The claimant must itself be live (a broker paused past its lease claims nothing until it registered again).
    const r = await this.db.query<OwnerRow>(
      'cluster claim',
      `INSERT INTO cluster_owners AS o (kind, name, owner, incarnation, epoch, since)
         SELECT $1, $2, $3, $4, 1, $5
         WHERE EXISTS (SELECT 1 FROM cluster_brokers b WHERE b.id = $3 AND b.incarnation = $4 AND b.lease_until > clock_timestamp())
       ON CONFLICT (kind, name) DO UPDATE SET owner = EXCLUDED.owner, incarnation = EXCLUDED.incarnation,
         epoch = o.epoch + 1, since = EXCLUDED.since
       WHERE NOT (o.owner IS NOT DISTINCT FROM EXCLUDED.owner AND o.incarnation IS NOT DISTINCT FROM EXCLUDED.incarnation)
         AND (o.owner IS NULL OR $6 OR NOT ${LIVE_OWNER})
       RETURNING ${OWNER_COLUMNS}`,
      [kind, name, id, incarnation, Date.now(), opts.force === true],
    );
    if (r.rows.length === 1) return toOwner(r.rows[0]);
    const now = await this.owner(kind, name);
    if (now === null) throw new FlowError('UNAVAILABLE', `cannot claim the ${kind} ${name}: this broker's membership lease has expired`);
    return now;
  }

  async release(kind: ResourceKind, name: string, id: number, incarnation: string, epoch: number): Promise<boolean> {
    const r = await this.db.query(
      'cluster release',
      `UPDATE cluster_owners SET owner = NULL, incarnation = NULL, since = $6
       WHERE kind = $1 AND name = $2 AND owner = $3 AND incarnation = $4 AND epoch = $5`,
      [kind, name, id, incarnation, epoch, Date.now()],
    );
    return r.rowCount === 1;
  }

  async forget(kind: ResourceKind, name: string): Promise<void> {
    await this.db.query('cluster forget', 'DELETE FROM cluster_owners WHERE kind = $1 AND name = $2', [kind, name]);
  }

  async notify(topic: string, payload: string): Promise<void> {
    if (Buffer.byteLength(payload) > 7900)
      throw new FlowError('INVALID_ARGUMENT', `cluster notification on ${topic} too large (${Buffer.byteLength(payload)} bytes)`);
    await this.db.query('cluster notify', 'SELECT pg_notify($1, $2)', [channelName(topic), payload]);
  }

  async listen(topic: string, fn: (payload: string) => void): Promise<void> {
    let list = this.topics.get(topic);
    if (!list) this.topics.set(topic, (list = []));
    list.push(fn);
    if (this.listener) await this.listener.query(`LISTEN "${channelName(topic)}"`);
    else await this.connectListener();
  }

  /** The LISTEN connection: one client, re-established with a backoff after a failure, LISTENing to every topic. */
  private connectListener(): Promise<void> {
    // One attempt at a time: two listen() calls before the connection is up must not open two.
    this.listenerConnecting ??= this.openListener().finally(() => {
      this.listenerConnecting = null;
    });
    return this.listenerConnecting;
  }

  private async openListener(): Promise<void> {
    if (this.closed || this.listener) return;
    // The read-write server of a multi-host URL: NOTIFY is not delivered to a standby's sessions.
    let client: pg.Client;
    try {
      client = await connectClient(this.opts.url, { application_name: 'flowmq-cluster-listen', keepAlive: true });
    } catch {
      this.retryListener();
      return;
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    client.on('notification', (n) => {
      const topic = n.channel.startsWith('flowmq_') ? n.channel.slice('flowmq_'.length) : n.channel;
      for (const fn of this.topics.get(topic) ?? []) fn(n.payload ?? '');
    });
    const lost = (err: unknown) => {
      if (this.listener !== client) return;
      this.listener = null;
      client.removeAllListeners('notification');
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.logger?.warn({ err }, 'cluster: the LISTEN connection to PostgreSQL was lost; reconnecting');
      this.retryListener();
    };
    client.on('error', lost);
    client.on('end', () => lost(new Error('connection ended')));
    try {
      this.listener = client;
      for (const topic of this.topics.keys()) await client.query(`LISTEN "${channelName(topic)}"`);
    } catch (err) {
      if (this.listener === client) lost(err);
      else {
        client.end().catch(() => undefined);
        this.retryListener();
      }
      return;
    }
    // Whatever was notified while there was no connection is lost: every listener reloads.
    for (const list of this.topics.values()) for (const fn of list) fn('*');
  }

  /** Another attempt at the LISTEN connection in a second. */
  private retryListener(): void {
    if (this.closed) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connectListener().catch(() => undefined);
    }, 1000);
    this.reconnectTimer.unref();
  }

  figures(): Record<string, unknown> {
    return { ...this.db.poolFigures(), listening: this.listener !== null };
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    const l = this.listener;
    this.listener = null;
    if (l) await l.end().catch(() => undefined);
    await this.db.end();
  }
}

/** PostgreSQL channel of a topic: a quoted identifier, so only its length matters (63 bytes). */
function channelName(topic: string): string {
  if (!/^[a-z0-9_.-]{1,50}$/.test(topic)) throw new FlowError('INVALID_ARGUMENT', `bad cluster notification topic "${topic}"`);
  return `flowmq_${topic}`;
}
