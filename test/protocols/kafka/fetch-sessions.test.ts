/**
 * Incremental fetch sessions (KIP-227) at the protocol level, with a raw client: a full fetch makes a session, an
 * incremental fetch answers only the partitions with something new, positions move only when the client says so,
 * forgotten partitions leave the session, the session errors (70, 71, 106), sessions are private to their
 * connection and closed with it, and the cache is bounded with Kafka's eviction rules.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Engine, encodeBatch } from '../../../src/core/index.js';
import { createKafkaAdapter, startKafkaListener } from '../../../src/protocols/kafka/index.js';
import type { KafkaAdapter } from '../../../src/protocols/kafka/adapter.js';
import { FetchSessionCache, MAX_SESSION_PARTITIONS, MAX_SESSIONS_PER_CONNECTION } from '../../../src/protocols/kafka/fetch-sessions.js';
import {
  FetchApi,
  KafkaErrorCode,
  ProduceApi,
  ZERO_UUID,
  decodeResponse,
  type FetchRequest,
  type FetchResponse,
  type Uuid,
} from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger } from './helpers.js';

type Part = [topic: string, partition: number, fetchOffset: number];

function fetchRequest(sessionId: number, sessionEpoch: number, parts: Part[], forgotten: Array<[string, number]> = [], ids?: Map<string, Uuid>): FetchRequest {
  const topics: FetchRequest['topics'] = [];
  for (const [topic, partition, fetchOffset] of parts) {
    let t = topics.find((x) => x.topic === topic);
    if (!t) topics.push((t = { topic, topicId: ids?.get(topic) ?? ZERO_UUID, partitions: [] }));
    t.partitions.push({ partition, currentLeaderEpoch: -1, fetchOffset, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 1 << 20 });
  }
  return {
    replicaId: -1,
    maxWaitMs: 0,
    minBytes: 0,
    maxBytes: 1 << 20,
    isolationLevel: 0,
    sessionId,
    sessionEpoch,
    topics,
    forgottenTopics: forgotten.map(([topic, p]) => ({ topic, topicId: ids?.get(topic) ?? ZERO_UUID, partitions: [p] })),
    rackId: '',
    clusterId: null,
  };
}

/** What a response names: "topic/partition" (or topic id hex/partition) with its high watermark and record bytes. */
function named(res: FetchResponse): string[] {
  return res.responses.flatMap((t) =>
    t.partitions.map(
      (p) =>
        `${t.topic || t.topicId?.toString('hex')}/${p.partitionIndex} hw=${p.highWatermark} bytes=${(p.records ?? []).reduce((n, b) => n + b.length, 0)}${p.errorCode !== 0 ? ` error=${p.errorCode}` : ''}`,
    ),
  );
}

describe('kafka incremental fetch sessions (KIP-227)', () => {
  let engine: Engine;
  let adapter: KafkaAdapter;
  let listener: ProtocolListener;
  let port: number;
  let now = 1_000_000;

  const produce = async (c: RawClient, topic: string, partition: number, value: string): Promise<void> => {
    const res = await c.call(ProduceApi, 9, {
      transactionalId: null,
      acks: -1,
      timeoutMs: 5000,
      topics: [
        {
          name: topic,
          partitions: [{ index: partition, records: encodeBatch([{ key: null, value: Buffer.from(value), headers: [], timestamp: Date.now() }]) }],
        },
      ],
    });
    assert.equal(res.topics[0]!.partitions[0]!.errorCode, 0);
  };

  before(async () => {
    const m = new MemoryStreams();
    engine = new Engine(m, m);
    await engine.createStream({ name: 'fs.a', partitions: 2 });
    await engine.createStream({ name: 'fs.b', partitions: 1 });
    const ctx = { engine, logger: captureLogger().logger, brokerId: 0 };
    adapter = createKafkaAdapter(ctx, { fetchSessionCacheSlots: 2, fetchSessionEvictionMs: 60_000 });
    // The cache's clock, moved by the eviction test.
    (adapter.fetchSessions as unknown as { now: () => number }).now = () => now;
    listener = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, adapter);
    port = listener.address().port;
  });
  after(async () => {
    await listener.close();
  });

  it('full fetch makes a session; incremental fetches answer only what changed, at the positions the client gives', async () => {
    const c = await RawClient.connect(port);
    try {
      await produce(c, 'fs.a', 0, 'a0');
      const full = await c.call(
        FetchApi,
        12,
        fetchRequest(0, 0, [
          ['fs.a', 0, 0],
          ['fs.a', 1, 0],
          ['fs.b', 0, 0],
        ]),
      );
      assert.equal(full.errorCode, 0);
      assert.ok(full.sessionId > 0, 'a session was made');
      const id = full.sessionId;
      assert.deepEqual(
        named(full).map((s) => s.replace(/bytes=\d+/, 'bytes')),
        ['fs.a/0 hw=1 bytes', 'fs.a/1 hw=0 bytes', 'fs.b/0 hw=0 bytes'],
      );

      // The client read fs.a/0's record and says so (offset 1): nothing is new, so the incremental response names
      // no partition, and keeps the session.
      const quiet = await c.call(FetchApi, 12, fetchRequest(id, 1, [['fs.a', 0, 1]]));
      assert.equal(quiet.errorCode, 0);
      assert.equal(quiet.sessionId, id);
      assert.deepEqual(named(quiet), []);

      // A record on fs.a/1: only that partition is answered (a partition the request does not name).
      await produce(c, 'fs.a', 1, 'a1');
      const changed = await c.call(FetchApi, 12, fetchRequest(id, 2, []));
      assert.deepEqual(
        named(changed).map((s) => s.replace(/bytes=[1-9]\d*/, 'bytes>0')),
        ['fs.a/1 hw=1 bytes>0'],
      );
      // The session reads where the client said, not past what it answered: until the client moves fs.a/1, the
      // same record is answered again (as Kafka does).
      const again = await c.call(FetchApi, 12, fetchRequest(id, 3, []));
      assert.deepEqual(
        named(again).map((s) => s.replace(/bytes=[1-9]\d*/, 'bytes>0')),
        ['fs.a/1 hw=1 bytes>0'],
      );

      // The client moves fs.a/1 past what it read: nothing is new now.
      const moved = await c.call(FetchApi, 12, fetchRequest(id, 4, [['fs.a', 1, 1]]));
      assert.deepEqual(named(moved), []);

      // Forgetting fs.b/0 takes it out of the session: its new record is not answered.
      const forgot = await c.call(FetchApi, 12, fetchRequest(id, 5, [], [['fs.b', 0]]));
      assert.deepEqual(named(forgot), []);
      await produce(c, 'fs.b', 0, 'b0');
      await produce(c, 'fs.a', 0, 'a0-2');
      const after = await c.call(FetchApi, 12, fetchRequest(id, 6, []));
      assert.deepEqual(
        named(after).map((s) => s.replace(/bytes=[1-9]\d*/, 'bytes>0')),
        ['fs.a/0 hw=2 bytes>0'],
      );

      // A wrong epoch is INVALID_FETCH_SESSION_EPOCH, and leaves the session as it was.
      const bad = await c.call(FetchApi, 12, fetchRequest(id, 9, []));
      assert.deepEqual([bad.errorCode, bad.sessionId, bad.responses.length], [KafkaErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, 0]);
      const stillThere = await c.call(FetchApi, 12, fetchRequest(id, 7, []));
      assert.deepEqual([stillThere.errorCode, stillThere.sessionId], [0, id]);

      // A session made with topic names used by a topic-id version (v13+) is FETCH_SESSION_TOPIC_ID_ERROR.
      const mixed = await c.call(FetchApi, 13, fetchRequest(id, 8, []));
      assert.equal(mixed.errorCode, KafkaErrorCode.FETCH_SESSION_TOPIC_ID_ERROR);

      // An unknown session id is FETCH_SESSION_ID_NOT_FOUND.
      const unknown = await c.call(FetchApi, 12, fetchRequest(id + 1, 1, []));
      assert.equal(unknown.errorCode, KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);

      // Epoch -1 closes the session (a full, sessionless fetch answered with session id 0).
      const closing = await c.call(FetchApi, 12, fetchRequest(id, -1, [['fs.b', 0, 0]]));
      assert.deepEqual([closing.errorCode, closing.sessionId], [0, 0]);
      assert.deepEqual(
        named(closing).map((s) => s.replace(/bytes=[1-9]\d*/, 'bytes>0')),
        ['fs.b/0 hw=1 bytes>0'],
      );
      const gone = await c.call(FetchApi, 12, fetchRequest(id, 8, []));
      assert.equal(gone.errorCode, KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);
    } finally {
      c.close();
    }
  });

  it('a session belongs to its connection: others cannot use it, and it closes with the connection', async () => {
    const a = await RawClient.connect(port);
    const b = await RawClient.connect(port);
    try {
      const before = adapter.fetchSessions.size;
      const full = await a.call(FetchApi, 12, fetchRequest(0, 0, [['fs.a', 0, 0]]));
      assert.ok(full.sessionId > 0);
      assert.equal(adapter.fetchSessions.size, before + 1);
      const stolen = await b.call(FetchApi, 12, fetchRequest(full.sessionId, 1, []));
      assert.equal(stolen.errorCode, KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);
      a.close();
      await a.closed;
      // The server side sees the close a moment later: b's next request is answered after it.
      const deadline = Date.now() + 5000;
      while (adapter.fetchSessions.size !== before && Date.now() < deadline) await b.call(FetchApi, 12, fetchRequest(0, -1, []));
      assert.equal(adapter.fetchSessions.size, before, 'the session went with its connection');
    } finally {
      a.close();
      b.close();
    }
  });

  it('keeps at most max.incremental.fetch.session.cache.slots sessions, evicting as Kafka does', async () => {
    const cs = await Promise.all([1, 2, 3, 4].map(() => RawClient.connect(port)));
    try {
      assert.equal(adapter.fetchSessions.size, 0);
      const stats0 = { ...adapter.fetchSessions.stats };
      const s1 = await cs[0]!.call(FetchApi, 12, fetchRequest(0, 0, [['fs.a', 0, 0]]));
      const s2 = await cs[1]!.call(
        FetchApi,
        12,
        fetchRequest(0, 0, [
          ['fs.a', 0, 0],
          ['fs.a', 1, 0],
        ]),
      );
      assert.ok(s1.sessionId > 0 && s2.sessionId > 0);
      // Full (2 slots), none stale, none smaller than a one-partition session: no session (id 0), a full answer.
      const s3 = await cs[2]!.call(FetchApi, 12, fetchRequest(0, 0, [['fs.b', 0, 0]]));
      assert.deepEqual([s3.errorCode, s3.sessionId, s3.responses.length], [0, 0, 1]);
      // A larger session evicts the smallest (s1's).
      const s4 = await cs[3]!.call(
        FetchApi,
        12,
        fetchRequest(0, 0, [
          ['fs.a', 0, 0],
          ['fs.a', 1, 0],
          ['fs.b', 0, 0],
        ]),
      );
      assert.ok(s4.sessionId > 0);
      assert.equal((await cs[0]!.call(FetchApi, 12, fetchRequest(s1.sessionId, 1, []))).errorCode, KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);
      assert.equal((await cs[1]!.call(FetchApi, 12, fetchRequest(s2.sessionId, 1, []))).errorCode, 0);
      // Past the eviction time, the least recently used session (s4, used longest ago) makes room for any new one.
      now += 60_001;
      assert.equal((await cs[1]!.call(FetchApi, 12, fetchRequest(s2.sessionId, 2, []))).errorCode, 0);
      const s5 = await cs[2]!.call(FetchApi, 12, fetchRequest(0, 0, [['fs.b', 0, 0]]));
      assert.ok(s5.sessionId > 0);
      assert.equal((await cs[3]!.call(FetchApi, 12, fetchRequest(s4.sessionId, 1, []))).errorCode, KafkaErrorCode.FETCH_SESSION_ID_NOT_FOUND);
      assert.equal(adapter.fetchSessions.size, 2);
      const st = adapter.fetchSessions.stats;
      assert.deepEqual([st.created - stats0.created, st.evicted - stats0.evicted, st.refused - stats0.refused], [4, 2, 1]);
    } finally {
      for (const c of cs) c.close();
    }
  });

  it('long-polls an incremental fetch until a session partition grows', async () => {
    const c = await RawClient.connect(port);
    const p = await RawClient.connect(port);
    try {
      const full = await c.call(FetchApi, 12, fetchRequest(0, 0, [['fs.b', 0, 1]]));
      assert.ok(full.sessionId > 0);
      const req = { ...fetchRequest(full.sessionId, 1, []), maxWaitMs: 10_000, minBytes: 1 };
      const started = Date.now();
      c.send(c.frame(FetchApi, 12, req));
      // The marker: a record produced now ends the wait long before max_wait_ms.
      await produce(p, 'fs.b', 0, 'wake');
      const res = decodeResponse(FetchApi, 12, await c.next(10_000)).body;
      assert.ok(Date.now() - started < 9000);
      assert.deepEqual(
        named(res).map((s) => s.replace(/hw=\d+/, 'hw').replace(/bytes=[1-9]\d*/, 'bytes>0')),
        ['fs.b/0 hw bytes>0'],
      );
    } finally {
      c.close();
      p.close();
    }
  });

  it('bounds what one connection holds: 8 sessions (a ninth drops its oldest), 100000 partitions a session', () => {
    const cache = new FetchSessionCache({ maxSlots: 100, evictionMs: 120_000 });
    const made = Array.from({ length: MAX_SESSIONS_PER_CONNECTION + 1 }, () => cache.create('conn-a', false, 1)!);
    assert.equal(cache.size, MAX_SESSIONS_PER_CONNECTION);
    assert.equal(cache.get(made[0]!.id, 'conn-a'), undefined, 'the oldest went');
    assert.ok(cache.get(made[1]!.id, 'conn-a') && cache.get(made.at(-1)!.id, 'conn-a'));
    assert.ok(cache.create('conn-b', false, 1), 'another connection is not limited by conn-a');
    assert.equal(cache.create('conn-c', false, MAX_SESSION_PARTITIONS + 1), null, 'too large a session is not made');
    assert.ok(cache.create('conn-c', false, MAX_SESSION_PARTITIONS));
    cache.removeOwner('conn-a');
    assert.equal(cache.size, 2);
  });
});
