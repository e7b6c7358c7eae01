/**
 * Schema migrations of the PostgreSQL metastore, in order: the tables and semantics of the SQLite metastore
 * (migrations.ts), in PostgreSQL's types, plus what a networked, shared store needs (partition epochs, a
 * per-session queue counter). A released migration is never edited; a change is a new entry at the end.
 *
 * Text keys use the "C" collation, so listings are ordered byte-wise as in SQLite, whatever the database's
 * locale. The partition mutations are PL/pgSQL functions: each is one statement (one round trip, one
 * transaction) that locks the partition's row, checks the writer's epoch and changes the data together, so a
 * fenced writer can never slip a change in between the check and the write.
 */
import type { PgMigration } from '../postgres-util.js';

export const postgresMigrations: readonly PgMigration[] = [
  {
    version: 1,
    name: 'initial schema',
    sql: `
      CREATE TABLE streams (
        name         text COLLATE "C" NOT NULL PRIMARY KEY,
        partitions   integer NOT NULL,
        bindings     text    NOT NULL,  -- JSON array of topic filters
        retention_ms bigint,            -- NULL keeps data forever
        created_at   bigint  NOT NULL
      );

      -- epoch: the ownership epoch, bumped by openPartition (flowmq_open_partition).
      CREATE TABLE partitions (
        stream           text COLLATE "C" NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition        integer NOT NULL,
        log_start_offset bigint  NOT NULL DEFAULT 0,
        flushed_offset   bigint  NOT NULL DEFAULT 0,
        epoch            bigint  NOT NULL DEFAULT 0,
        PRIMARY KEY (stream, partition)
      );

      CREATE TABLE segments (
        stream        text COLLATE "C" NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition     integer NOT NULL,
        base_offset   bigint  NOT NULL,
        end_offset    bigint  NOT NULL,
        object_key    text    NOT NULL,
        size          bigint  NOT NULL,
        max_timestamp bigint  NOT NULL,
        created_at    bigint  NOT NULL,
        PRIMARY KEY (stream, partition, base_offset)
      );

      CREATE TABLE consumer_offsets (
        group_id     text COLLATE "C" NOT NULL,
        stream       text COLLATE "C" NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition    integer NOT NULL,
        "offset"     bigint  NOT NULL,
        metadata     text,
        committed_at bigint  NOT NULL,
        PRIMARY KEY (group_id, stream, partition)
      );
      -- Cascading deletes from streams look offsets up by stream, which the primary key cannot serve.
      CREATE INDEX consumer_offsets_by_stream ON consumer_offsets (stream);

      CREATE TABLE client_sessions (
        client_id  text COLLATE "C" NOT NULL PRIMARY KEY,
        protocol   text    NOT NULL,
        state      text    NOT NULL,
        expires_at bigint,
        updated_at bigint  NOT NULL
      );
      CREATE INDEX client_sessions_by_protocol ON client_sessions (protocol, client_id);

      -- Per session with a queue: the next seq to hand out and how many entries the queue holds. Seqs come from
      -- this counter (an UPDATE ... RETURNING under the row's lock), never from MAX(seq)+1, which two
      -- connections could read at once; the length saves a COUNT(*) on every write. The row also serializes the
      -- queue writes of one session across brokers.
      CREATE TABLE session_queue_meta (
        client_id text COLLATE "C" NOT NULL PRIMARY KEY,
        next_seq  bigint  NOT NULL,
        length    bigint  NOT NULL
      );

      CREATE TABLE session_queue (
        client_id text COLLATE "C" NOT NULL,
        seq       bigint  NOT NULL,
        data      bytea   NOT NULL,
        PRIMARY KEY (client_id, seq)
      );

      CREATE TABLE retained_messages (
        topic      text COLLATE "C" NOT NULL PRIMARY KEY,
        data       bytea   NOT NULL,
        updated_at bigint  NOT NULL
      );

      CREATE TABLE producer_ids (
        id      integer NOT NULL PRIMARY KEY CHECK (id = 0),
        next_id bigint  NOT NULL
      );
      INSERT INTO producer_ids (id, next_id) VALUES (0, 0);

      CREATE TABLE producer_state (
        stream     text COLLATE "C" NOT NULL REFERENCES streams(name) ON DELETE CASCADE,
        partition  integer NOT NULL,
        end_offset bigint  NOT NULL,
        state      text    NOT NULL,
        PRIMARY KEY (stream, partition)
      );

      -- Locks the partition's row (when it exists) until the end of the transaction and refuses a stale epoch.
      -- A partition without a row was never opened: its epoch is 0. openPartition updates the row, so it waits
      -- for a mutation holding the lock, and a mutation that comes after it sees the new epoch.
      CREATE FUNCTION flowmq_check_epoch(p_stream text, p_partition integer, p_epoch bigint) RETURNS void
      LANGUAGE plpgsql AS $fn$
      DECLARE cur bigint;
      BEGIN
        SELECT epoch INTO cur FROM partitions WHERE stream = p_stream AND partition = p_partition FOR UPDATE;
        IF FOUND AND p_epoch < cur THEN
          RAISE EXCEPTION 'partition %/% is owned by epoch %: epoch % is fenced', p_stream, p_partition, cur, p_epoch
            USING ERRCODE = 'FMF01';
        END IF;
      END $fn$;

      CREATE FUNCTION flowmq_require_stream(p_stream text) RETURNS void
      LANGUAGE plpgsql AS $fn$
      BEGIN
        -- FOR KEY SHARE: a concurrent deleteStream waits for this transaction instead of racing it.
        PERFORM 1 FROM streams WHERE name = p_stream FOR KEY SHARE;
        IF NOT FOUND THEN
          RAISE EXCEPTION 'stream "%" not found', p_stream USING ERRCODE = 'FMN01';
        END IF;
      END $fn$;

      CREATE FUNCTION flowmq_commit_segment(p_stream text, p_partition integer, p_base bigint, p_end bigint,
        p_key text, p_size bigint, p_max_ts bigint, p_created bigint, p_epoch bigint) RETURNS void
      LANGUAGE plpgsql AS $fn$
      DECLARE flushed bigint;
      BEGIN
        PERFORM flowmq_require_stream(p_stream);
        PERFORM flowmq_check_epoch(p_stream, p_partition, p_epoch);
        SELECT flushed_offset INTO flushed FROM partitions WHERE stream = p_stream AND partition = p_partition;
        flushed := COALESCE(flushed, 0);
        -- The same segment again: a retry whose first commit landed but whose reply was lost. A no-op, or the
        -- partition could never seal again.
        IF flushed = p_end AND EXISTS (SELECT 1 FROM segments WHERE stream = p_stream AND partition = p_partition
            AND base_offset = p_base AND end_offset = p_end AND object_key = p_key) THEN
          RETURN;
        END IF;
        IF p_base <> flushed THEN
          RAISE EXCEPTION 'segment [%, %) of %/% does not start at the flushed offset %', p_base, p_end, p_stream,
            p_partition, flushed USING ERRCODE = 'FMI01';
        END IF;
        INSERT INTO segments (stream, partition, base_offset, end_offset, object_key, size, max_timestamp, created_at)
          VALUES (p_stream, p_partition, p_base, p_end, p_key, p_size, p_max_ts, p_created);
        INSERT INTO partitions (stream, partition, flushed_offset) VALUES (p_stream, p_partition, p_end)
          ON CONFLICT (stream, partition) DO UPDATE SET flushed_offset = excluded.flushed_offset;
      END $fn$;

      CREATE FUNCTION flowmq_set_log_start(p_stream text, p_partition integer, p_offset bigint, p_epoch bigint)
        RETURNS void
      LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM flowmq_require_stream(p_stream);
        PERFORM flowmq_check_epoch(p_stream, p_partition, p_epoch);
        -- Only forward: a late or repeated retention pass must not undo a later one.
        INSERT INTO partitions (stream, partition, log_start_offset) VALUES (p_stream, p_partition, p_offset)
          ON CONFLICT (stream, partition)
          DO UPDATE SET log_start_offset = GREATEST(partitions.log_start_offset, excluded.log_start_offset);
      END $fn$;

      CREATE FUNCTION flowmq_delete_segment(p_stream text, p_partition integer, p_base bigint, p_epoch bigint)
        RETURNS void
      LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM flowmq_check_epoch(p_stream, p_partition, p_epoch);
        DELETE FROM segments WHERE stream = p_stream AND partition = p_partition AND base_offset = p_base;
      END $fn$;

      CREATE FUNCTION flowmq_put_producer_state(p_stream text, p_partition integer, p_end bigint, p_state text,
        p_epoch bigint) RETURNS void
      LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM flowmq_check_epoch(p_stream, p_partition, p_epoch);
        INSERT INTO producer_state (stream, partition, end_offset, state) VALUES (p_stream, p_partition, p_end, p_state)
          ON CONFLICT (stream, partition) DO UPDATE SET end_offset = excluded.end_offset, state = excluded.state;
      END $fn$;

      -- Appends to a session's queue (seqs from the counter row), then drops the oldest beyond p_max.
      -- Returns the first seq given and how many entries were dropped.
      CREATE FUNCTION flowmq_queue_append(p_client text, p_data bytea[], p_max bigint,
        OUT first_seq bigint, OUT dropped bigint)
      LANGUAGE plpgsql AS $fn$
      DECLARE n bigint := COALESCE(array_length(p_data, 1), 0); len bigint;
      BEGIN
        dropped := 0;
        IF n = 0 THEN
          SELECT length INTO len FROM session_queue_meta WHERE client_id = p_client FOR UPDATE;
          len := COALESCE(len, 0);
        ELSE
          INSERT INTO session_queue_meta AS m (client_id, next_seq, length) VALUES (p_client, 1 + n, n)
            ON CONFLICT (client_id) DO UPDATE SET next_seq = m.next_seq + n, length = m.length + n
            RETURNING m.next_seq - n, m.length INTO first_seq, len;
          INSERT INTO session_queue (client_id, seq, data)
            SELECT p_client, first_seq + t.ord - 1, t.d FROM unnest(p_data) WITH ORDINALITY AS t(d, ord);
        END IF;
        IF len > p_max THEN
          dropped := len - p_max;
          DELETE FROM session_queue WHERE client_id = p_client AND seq IN
            (SELECT seq FROM session_queue WHERE client_id = p_client ORDER BY seq LIMIT dropped);
          UPDATE session_queue_meta SET length = p_max WHERE client_id = p_client;
        END IF;
      END $fn$;

      -- updateQueue: rewrites (same seq), removals, then appends bounded by p_max, in one transaction.
      CREATE FUNCTION flowmq_queue_update(p_client text, p_rseq bigint[], p_rdata bytea[], p_remove bigint[],
        p_append bytea[], p_max bigint, OUT first_seq bigint, OUT dropped bigint)
      LANGUAGE plpgsql AS $fn$
      DECLARE removed bigint;
      BEGIN
        -- Take the session's row lock first, so concurrent writers of one queue (two brokers) go one by one.
        PERFORM 1 FROM session_queue_meta WHERE client_id = p_client FOR UPDATE;
        IF array_length(p_rseq, 1) > 0 THEN
          UPDATE session_queue q SET data = r.d FROM unnest(p_rseq, p_rdata) AS r(s, d)
            WHERE q.client_id = p_client AND q.seq = r.s;
        END IF;
        IF array_length(p_remove, 1) > 0 THEN
          DELETE FROM session_queue WHERE client_id = p_client AND seq = ANY(p_remove);
          GET DIAGNOSTICS removed = ROW_COUNT;
          IF removed > 0 THEN
            UPDATE session_queue_meta SET length = length - removed WHERE client_id = p_client;
          END IF;
        END IF;
        SELECT a.first_seq, a.dropped INTO first_seq, dropped FROM flowmq_queue_append(p_client, p_append, p_max) a;
      END $fn$;
    `,
  },
  // Version 2: issue 14 (AMQP 0-9-1 and durable queues), as SQLite's version 5. Queue messages are in the queue
  // store's own tables (src/storage/queues/postgres-queue-store.ts).
  {
    version: 2,
    name: 'queue, exchange and binding definitions',
    sql: `
      CREATE TABLE queue_defs (
        name            text COLLATE "C" NOT NULL PRIMARY KEY,
        durable         boolean NOT NULL,
        exclusive_owner text,
        auto_delete     boolean NOT NULL,
        arguments       text    NOT NULL,  -- JSON (text, not jsonb: kept as written)
        raw_arguments   text    NOT NULL,
        created_at      bigint  NOT NULL
      );

      CREATE TABLE exchange_defs (
        name               text COLLATE "C" NOT NULL PRIMARY KEY,
        type               text    NOT NULL,
        durable            boolean NOT NULL,
        auto_delete        boolean NOT NULL,
        internal           boolean NOT NULL,
        alternate_exchange text,
        raw_arguments      text    NOT NULL,
        created_at         bigint  NOT NULL
      );

      -- Identified by everything a binding says (bindingKey); the indexes serve the deletes of a queue or exchange.
      CREATE TABLE binding_defs (
        binding_key      text COLLATE "C" NOT NULL PRIMARY KEY,
        source           text COLLATE "C" NOT NULL,
        destination_kind text NOT NULL,
        destination      text COLLATE "C" NOT NULL,
        key              text COLLATE "C" NOT NULL,
        rule             text,
        arguments        text NOT NULL
      );
      CREATE INDEX binding_defs_by_source ON binding_defs (source);
      CREATE INDEX binding_defs_by_destination ON binding_defs (destination_kind, destination);
    `,
  },
  // Version 3: issue 15 (NATS JetStream over FlowMQ streams), as SQLite's version 6.
  {
    version: 3,
    name: 'JetStream consumer state',
    sql: `
      -- One row per JetStream consumer (ConsumerStateStore). An ack rewrites this one row and nothing else: a new
      -- tuple version that, no indexed column changing, can be a HOT update (no index write) when its page has
      -- room, which the fillfactor leaves for rows rewritten this often. No foreign key to streams, as in SQLite:
      -- Engine.deleteStream deletes a stream's consumers itself, served by the primary key's (stream, ...) prefix.
      CREATE TABLE jetstream_consumers (
        stream                 text COLLATE "C" NOT NULL,
        name                   text COLLATE "C" NOT NULL,
        config                 text   NOT NULL,  -- JetStream ConsumerConfig, JSON (text: kept as written)
        created_at             bigint NOT NULL,
        delivered_seq          bigint NOT NULL,
        delivered_consumer_seq bigint NOT NULL,
        ack_floor              bigint NOT NULL,
        acked                  text   NOT NULL,  -- JSON array of sequences above ack_floor, ascending
        PRIMARY KEY (stream, name)
      ) WITH (fillfactor = 70);
    `,
  },
  // Version 4: issue 16 (the control plane), as SQLite's version 7.
  {
    version: 4,
    name: 'control plane documents',
    sql: `
      -- One JSON document per (kind, name) (ControlStore, src/control/store.ts). text, not jsonb: kept as written.
      CREATE TABLE control_docs (
        kind       text COLLATE "C" NOT NULL,
        name       text COLLATE "C" NOT NULL,
        data       text   NOT NULL,
        updated_at bigint NOT NULL,
        PRIMARY KEY (kind, name)
      );
      -- Bumped by the statement of every change (a data-modifying CTE, same transaction): brokers poll this one
      -- number to learn that another broker changed users or policies.
      CREATE TABLE control_version (
        id      integer NOT NULL PRIMARY KEY CHECK (id = 0),
        version bigint  NOT NULL
      );
      INSERT INTO control_version (id, version) VALUES (0, 0);
    `,
  },
  // Version 5: issue 25 (Kafka topic configs), as SQLite's version 8.
  {
    version: 5,
    name: 'stream settings',
    sql: `
      -- Settings beyond retention_ms, as JSON text (rows.ts settingsColumn); NULL: none.
      ALTER TABLE streams ADD COLUMN settings text;
    `,
  },
  // Version 6: issue 25 (Kafka topic ids, KIP-516), as SQLite's version 9.
  {
    version: 6,
    name: 'stream ids',
    sql: `
      -- StreamDef.id, 32 lowercase hex digits; streams made before it get a random one (gen_random_uuid, built in
      -- from PostgreSQL 13, is evaluated per row).
      ALTER TABLE streams ADD COLUMN stream_id text;
      UPDATE streams SET stream_id = replace(gen_random_uuid()::text, '-', '');
      CREATE UNIQUE INDEX streams_by_id ON streams (stream_id);
    `,
  },
  // Version 7: issue 30 (MQTT QoS 2 exactly once across a crash), as SQLite's version 10.
  {
    version: 7,
    name: 'session queue marks',
    sql: `
      -- The publish keys a session's queue took (SessionStore.updateQueue's marks): {producer: highest seq}, merged
      -- by the statement of the append (a data-modifying CTE, same transaction); removed with the session. A table of
      -- its own: flowmq_queue_update may insert the session's session_queue_meta row in that same statement.
      CREATE TABLE session_marks (
        client_id text COLLATE "C" NOT NULL PRIMARY KEY,
        marks     jsonb NOT NULL
      );
    `,
  },
];
