/**
 * The PostgreSQL metastore's state (`PostgresState`, the base of `PostgresMetastore`): the pool, the per-key
 * serializer with its key categories, the pending JetStream consumer batches, and how a call runs: `keyed` (after the
 * calls issued before it on the same key), `afterAll` (a read over every key of a category), `q` (a named statement).
 *
 * The resources are functions over it, mirroring the SQLite backend: postgres-streams.ts (streams, partitions,
 * segments, producer ids and state), postgres-groups.ts (consumer offsets, JetStream consumers), postgres-sessions.ts
 * (sessions, session queues, retained messages), postgres-catalog.ts (queues, exchanges, bindings, control documents).
 */
import { FlowError } from '../../core/index.js';
import type { ConsumerRecord } from '../../core/index.js';
import { KeyedSerializer, type PgPool } from '../postgres-util.js';

// Key categories of the serializer (see KeyedSerializer); one per kind of key named in the contract.
export const STREAM = 's';
export const PARTITION = 'p';
export const GROUP = 'g';
export const CLIENT = 'c';
export const TOPIC = 't';
/**
 * Queue, exchange and binding definitions: one key for all of them. Deleting a queue or an exchange deletes
 * bindings, so the calls must keep their order across the three kinds; declarations are rare enough for that.
 */
export const CATALOG = 'd';
/**
 * JetStream consumer state: keyed by the stream, not by (stream, consumer), so that deleteConsumers and
 * listConsumers of a stream are ordered with the writes of all its consumers. The puts queued behind a stream's
 * running call are one batch (see putConsumer), so the key costs no round trips.
 */
export const CONSUMERS = 'j';

/** The puts of one stream's consumers waiting behind that stream's running call: written as one statement. */
export interface ConsumerBatch {
  /** Latest record per consumer name, with the owner epoch its put was fenced by (cluster mode), if any. */
  readonly recs: Map<string, { rec: ConsumerRecord; epoch: number | undefined }>;
  /** Settles when the batch is written: the puts refused as fenced, by name (the others were written). */
  done: Promise<Map<string, unknown>>;
}

/**
 * Control plane documents, keyed by (kind, name); listControl and controlVersion wait for every control write
 * issued before them (a broker that just wrote reads its own write back).
 */
export const CONTROL = 'k';

export const partKey = (stream: string, partition: number): string => `${partition}\u0000${stream}`;

export class PostgresState {
  closed = false;
  readonly chain = new KeyedSerializer();
  /** Per stream: the consumer batch queued and not started yet, which later puts join (see putConsumer). */
  readonly consumerBatches = new Map<string, ConsumerBatch>();
  /** putConsumer calls, and the statements that wrote them (fewer when puts were coalesced); for figures. */
  readonly consumerStats = { puts: 0, writes: 0 };
  /** Migrations this open applied (0 when another broker had already done them); for tests. */
  migrationsApplied = 0;

  protected constructor(readonly db: PgPool) {}

  check(): void {
    if (this.closed) throw new FlowError('CLOSED', 'metastore is closed');
  }

  /** Runs `fn` after the calls issued before it on the same key. */
  keyed<T>(category: string, key: string, fn: () => Promise<T>): Promise<T> {
    this.check();
    return this.chain.run(category, key, fn);
  }

  /** A read over every key of a category: waits for the calls of that category issued before it. */
  async afterAll<T>(category: string, fn: () => Promise<T>): Promise<T> {
    this.check();
    await this.chain.settled(category);
    return fn();
  }

  q<R extends Record<string, unknown>>(what: string, text: string, values?: unknown[]) {
    // Named statements are parsed and planned once per connection.
    return this.db.query<R>(what, { name: `fm_${what}`, text }, values);
  }
}
