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
  {
    version: 2,
    name: 'client sessions and retained messages',
    sql: `
      -- Durable client sessions (MQTT persistent sessions), keyed by client id so any broker can resume one.
      CREATE TABLE client_sessions (
        client_id  TEXT    NOT NULL PRIMARY KEY,
        protocol   TEXT    NOT NULL,
        state      TEXT    NOT NULL,   -- adapter JSON: subscriptions, pending will, QoS 2 ids
        expires_at INTEGER,            -- NULL while a client is connected
        updated_at INTEGER NOT NULL
      ) STRICT;

      -- Messages waiting for an offline session, oldest first; bounded per session by the broker.
      CREATE TABLE session_queue (
        client_id TEXT    NOT NULL,
        seq       INTEGER NOT NULL,
        data      BLOB    NOT NULL,
        PRIMARY KEY (client_id, seq)
      ) STRICT, WITHOUT ROWID;

      CREATE TABLE retained_messages (
        topic      TEXT    NOT NULL PRIMARY KEY,
        data       BLOB    NOT NULL,
        updated_at INTEGER NOT NULL
      ) STRICT;
    `,
  },
  // Version 3 belongs to the Kafka adapter (issue 4), appended after the MQTT sessions migration (version 2).
  {
    version: 3,
    name: 'producer ids and producer state snapshots',
    sql: `
      -- The next producer id never handed out (KIP-98 idempotent producers): one row, moved forward in blocks.
      CREATE TABLE producer_ids (
        id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 0),
        next_id INTEGER NOT NULL
      ) STRICT;
      INSERT INTO producer_ids (id, next_id) VALUES (0, 0);

      -- Per partition: the idempotent-producer state (last sequences per producer id) as of end_offset, written
      -- when a segment is committed; a restart replays batches past end_offset on top of it.
      CREATE TABLE producer_state (
        stream     TEXT    NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition  INTEGER NOT NULL,
        end_offset INTEGER NOT NULL,
        state      TEXT    NOT NULL,  -- JSON
        PRIMARY KEY (stream, partition)
      ) STRICT, WITHOUT ROWID;
    `,
  },
  // Version 4: the storage contracts of issue 13 (partition ownership epochs, session-queue counters).
  {
    version: 4,
    name: 'partition epochs and session-queue counters',
    sql: `
      -- The partition's ownership epoch, bumped by each openPartition; mutations carrying an older one are refused.
      ALTER TABLE partitions ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;

      -- Per session queue: the next seq to hand out (seqs only increase, never MAX(seq)+1, which two concurrent
      -- writers can both read) and the number of entries (kept, so that bounding the queue needs no COUNT(*)).
      -- Removed with the session (deleteSession).
      CREATE TABLE session_queues (
        client_id TEXT    NOT NULL PRIMARY KEY,
        next_seq  INTEGER NOT NULL,
        length    INTEGER NOT NULL
      ) STRICT, WITHOUT ROWID;
      INSERT INTO session_queues (client_id, next_seq, length)
        SELECT client_id, MAX(seq) + 1, COUNT(*) FROM session_queue GROUP BY client_id;
    `,
  },
  // Version 5: issue 14 (AMQP 0-9-1 and durable queues). Queue messages are not here: see src/storage/queues.
  {
    version: 5,
    name: 'queue, exchange and binding definitions',
    sql: `
      -- Durable queue definitions (QueueCatalog). arguments / raw_arguments: JSON objects.
      CREATE TABLE queue_defs (
        name            TEXT    NOT NULL PRIMARY KEY,
        durable         INTEGER NOT NULL,
        exclusive_owner TEXT,
        auto_delete     INTEGER NOT NULL,
        arguments       TEXT    NOT NULL,
        raw_arguments   TEXT    NOT NULL,
        created_at      INTEGER NOT NULL
      ) STRICT;

      CREATE TABLE exchange_defs (
        name               TEXT    NOT NULL PRIMARY KEY,
        type               TEXT    NOT NULL,
        durable            INTEGER NOT NULL,
        auto_delete        INTEGER NOT NULL,
        internal           INTEGER NOT NULL,
        alternate_exchange TEXT,
        raw_arguments      TEXT    NOT NULL,
        created_at         INTEGER NOT NULL
      ) STRICT;

      -- A binding is identified by everything it says (bindingKey: source, destination, key, rule and its
      -- arguments with sorted keys), as AMQP identifies bindings. Deleting a queue or an exchange deletes the
      -- bindings naming it, found through the two indexes.
      CREATE TABLE binding_defs (
        binding_key      TEXT NOT NULL PRIMARY KEY,
        source           TEXT NOT NULL,
        destination_kind TEXT NOT NULL,
        destination      TEXT NOT NULL,
        key              TEXT NOT NULL,
        rule             TEXT,
        arguments        TEXT NOT NULL
      ) STRICT;
      CREATE INDEX binding_defs_by_source ON binding_defs (source);
      CREATE INDEX binding_defs_by_destination ON binding_defs (destination_kind, destination);
    `,
  },
  // Version 6: issue 15 (NATS JetStream over FlowMQ streams).
  {
    version: 6,
    name: 'JetStream consumer state',
    sql: `
      -- One row per JetStream consumer (ConsumerStateStore): its configuration and its position. An ack rewrites
      -- this one row and nothing else. A rowid table, not WITHOUT ROWID: rows hold the consumer's JSON config and
      -- its acks above the floor (up to kilobytes), too large for the primary-key b-tree's cells. No foreign key to
      -- streams: the store keeps no opinion on which streams exist (as MemoryStore), and Engine.deleteStream
      -- deletes a stream's consumers itself (deleteConsumers, served by the primary key's (stream, ...) prefix).
      CREATE TABLE jetstream_consumers (
        stream                 TEXT    NOT NULL,
        name                   TEXT    NOT NULL,
        config                 TEXT    NOT NULL,  -- JetStream ConsumerConfig, JSON
        created_at             INTEGER NOT NULL,
        delivered_seq          INTEGER NOT NULL,
        delivered_consumer_seq INTEGER NOT NULL,
        ack_floor              INTEGER NOT NULL,
        acked                  TEXT    NOT NULL,  -- JSON array of sequences above ack_floor, ascending
        PRIMARY KEY (stream, name)
      ) STRICT;
    `,
  },
  // Version 7: issue 16 (the control plane).
  {
    version: 7,
    name: 'control plane documents',
    sql: `
      -- Users, groups, API tokens, policies, namespaces and login sessions (ControlStore, src/control/store.ts): one
      -- JSON document per (kind, name). Few rows, read whole at start and after each change.
      CREATE TABLE control_docs (
        kind       TEXT    NOT NULL,
        name       TEXT    NOT NULL,
        data       TEXT    NOT NULL,  -- JSON object
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (kind, name)
      ) STRICT;
      -- One row: bumped in the transaction of every change, so that another process sharing the file (or the
      -- database, for PostgreSQL) learns that something changed by reading one number.
      CREATE TABLE control_version (
        id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 0),
        version INTEGER NOT NULL
      ) STRICT;
      INSERT INTO control_version (id, version) VALUES (0, 0);
    `,
  },
  // Version 8: issue 25 (Kafka topic configs).
  {
    version: 8,
    name: 'stream settings',
    sql: `
      -- A stream's settings beyond retention_ms, as JSON (rows.ts settingsColumn): retention by size, segment size
      -- and age, and the protocols' own stored settings (Kafka's other topic configs). NULL: none.
      ALTER TABLE streams ADD COLUMN settings TEXT;
    `,
  },
  // Version 9: issue 25 (Kafka topic ids, KIP-516).
  {
    version: 9,
    name: 'stream ids',
    sql: `
      -- StreamDef.id: a stream's identity (Kafka's topic id), 32 lowercase hex digits, made at creation and new for
      -- every incarnation of a name. Streams made before it get a random one here (randomblob is evaluated per row).
      ALTER TABLE streams ADD COLUMN stream_id TEXT;
      UPDATE streams SET stream_id = lower(hex(randomblob(16)));
      CREATE UNIQUE INDEX streams_by_id ON streams (stream_id);
    `,
  },
  // Version 10: issue 30 (MQTT QoS 2 exactly once across a crash).
  {
    version: 10,
    name: 'session queue marks',
    sql: `
      -- The publish keys a session's queue took (SessionStore.updateQueue's marks): JSON {producer: highest seq},
      -- written in the transaction of the append; removed with the session (its session_queues row).
      ALTER TABLE session_queues ADD COLUMN marks TEXT;
    `,
  },
];
