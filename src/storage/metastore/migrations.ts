/**
 * Schema migrations of the SQLite metastore, in order. A released migration is never edited: a change to the
 * schema is a new entry at the end, so that every database, however old, reaches the same schema by applying
 * the ones it has not seen. `version` numbers are consecutive from 1.
 */
export interface Migration {
  version: number;
  name: string;
  /** SQL run inside the migration transaction. */
  sql: string;
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'initial schema',
    sql: `
      CREATE TABLE streams (
        name         TEXT    NOT NULL PRIMARY KEY,
        partitions   INTEGER NOT NULL,
        bindings     TEXT    NOT NULL,  -- JSON array of topic filters
        retention_ms INTEGER,           -- NULL keeps data forever
        created_at   INTEGER NOT NULL
      ) STRICT;

      -- Rows refer to their stream with ON DELETE CASCADE, so deleting a stream cannot leave orphans.
      CREATE TABLE partitions (
        stream           TEXT    NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition        INTEGER NOT NULL,
        log_start_offset INTEGER NOT NULL DEFAULT 0,
        flushed_offset   INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (stream, partition)
      ) STRICT, WITHOUT ROWID;

      CREATE TABLE segments (
        stream        TEXT    NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition     INTEGER NOT NULL,
        base_offset   INTEGER NOT NULL,
        end_offset    INTEGER NOT NULL,
        object_key    TEXT    NOT NULL,
        size          INTEGER NOT NULL,
        max_timestamp INTEGER NOT NULL,
        created_at    INTEGER NOT NULL,
        PRIMARY KEY (stream, partition, base_offset)
      ) STRICT, WITHOUT ROWID;

      CREATE TABLE consumer_offsets (
        group_id     TEXT    NOT NULL,
        stream       TEXT    NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition    INTEGER NOT NULL,
        "offset"     INTEGER NOT NULL,
        metadata     TEXT,
        committed_at INTEGER NOT NULL,
        PRIMARY KEY (group_id, stream, partition)
      ) STRICT, WITHOUT ROWID;

      -- Cascading deletes from streams look offsets up by stream, which the primary key cannot serve.
      CREATE INDEX consumer_offsets_by_stream ON consumer_offsets (stream);
    `,
  },
];
