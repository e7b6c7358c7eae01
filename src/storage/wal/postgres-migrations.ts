/**
 * Schema migrations of the PostgreSQL WAL (postgres-wal.ts), recorded apart from the metastore's so that the
 * two may share a database or not. A released migration is never edited.
 */
import type { PgMigration } from '../postgres-util.js';

export const walMigrations: readonly PgMigration[] = [
  {
    version: 1,
    name: 'wal entries and key epochs',
    sql: `
      -- id orders the log: replay walks it, so entries of a key come back in append order.
      CREATE TABLE wal_entries (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key         text COLLATE "C" NOT NULL,
        base_offset bigint  NOT NULL,
        end_offset  bigint  NOT NULL,
        epoch       bigint  NOT NULL,
        bytes       integer NOT NULL,  -- octet_length(data), kept for size() and trim's count
        data        bytea   NOT NULL
      );
      -- trim deletes by key and end offset.
      CREATE INDEX wal_entries_by_key ON wal_entries (key, end_offset);
      -- Data is written once and read at replay: no point compressing it again (Kafka batches already are).
      ALTER TABLE wal_entries ALTER COLUMN data SET STORAGE EXTERNAL;

      -- The highest epoch given for each key, by an append or by fence().
      CREATE TABLE wal_epochs (
        key   text COLLATE "C" NOT NULL PRIMARY KEY,
        epoch bigint NOT NULL
      );

      -- Takes the row locks of a group's keys (in key order, so two writers cannot deadlock), returns each key's
      -- epoch as it was, and raises it to the group's highest. The caller inserts only the entries whose epoch is
      -- at least the returned one, in the same transaction: a fence() committed before can never be overtaken,
      -- and one issued meanwhile waits for the lock.
      CREATE FUNCTION flowmq_wal_lock(p_keys text[], p_epochs bigint[]) RETURNS TABLE (out_key text, out_epoch bigint)
      LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO wal_epochs AS w (key, epoch)
          SELECT u.k, 0 FROM unnest(p_keys) AS u(k) ORDER BY u.k
          ON CONFLICT DO NOTHING;
        RETURN QUERY SELECT w.key, w.epoch FROM wal_epochs w WHERE w.key = ANY(p_keys) ORDER BY w.key FOR UPDATE;
        UPDATE wal_epochs w SET epoch = u.e FROM unnest(p_keys, p_epochs) AS u(k, e)
          WHERE w.key = u.k AND u.e > w.epoch;
      END $fn$;
    `,
  },
  {
    version: 2,
    name: 'shard identity',
    sql: `
      -- One row: this database's identity as a WAL shard. A sharded WAL (sharded-wal.ts) records its shards' ids, in
      -- order, in the metastore's database, and refuses a broker whose list names other databases (or one twice).
      CREATE TABLE wal_shard_identity (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        id  uuid NOT NULL DEFAULT gen_random_uuid()
      );
      INSERT INTO wal_shard_identity DEFAULT VALUES;
    `,
  },
];

/**
 * Schema migrations of the object WAL (object-wal.ts), recorded apart (flowmq_object_wal_schema_migrations). It
 * fences keys with the PostgreSQL WAL's wal_epochs and flowmq_wal_lock, so walMigrations run first.
 */
export const objectWalMigrations: readonly PgMigration[] = [
  {
    version: 1,
    name: 'object WAL objects and ranges',
    sql: `
      -- Every object written and indexed: trim deletes a row (then the object) once no range names it.
      CREATE TABLE wal_objects (
        object_key text COLLATE "C" NOT NULL PRIMARY KEY,
        bytes      bigint NOT NULL,
        created    timestamptz NOT NULL DEFAULT now()
      );
      -- One row per object and key: the key's entries of one window, bytes [position, position + bytes) of the
      -- object, entry i being bases[i]..ends[i] (offsets), sizes[i] bytes, written under epochs[i]. id orders the log.
      CREATE TABLE wal_object_ranges (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key         text COLLATE "C" NOT NULL,
        base_offset bigint NOT NULL,
        end_offset  bigint NOT NULL,
        epoch       bigint NOT NULL,
        object_key  text COLLATE "C" NOT NULL,
        position    bigint NOT NULL,
        bytes       integer NOT NULL,
        bases       bigint[] NOT NULL,
        ends        bigint[] NOT NULL,
        sizes       integer[] NOT NULL,
        epochs      bigint[] NOT NULL
      );
      CREATE INDEX wal_object_ranges_by_key ON wal_object_ranges (key, end_offset);
      CREATE INDEX wal_object_ranges_by_object ON wal_object_ranges (object_key);
    `,
  },
];
