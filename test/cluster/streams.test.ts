/**
 * Stream partitions in cluster mode (src/cluster/streams.ts, LogManager's acquire/release): brokers in one process
 * over one real PostgreSQL (metastore and a shared WAL), one object directory, a MemoryClusterStore and a LocalHub
 * channel. Handover loses nothing and keeps offsets contiguous; a forwarded append settles only once durable at the
 * owner; a paused owner is fenced; acquire reads back what a dead owner left in the WAL, with its producer state;
 * one broker's WAL trim never deletes another's entries; the catalog follows across brokers.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { call, Cluster, ClusterStreams, LocalHub, MemoryClusterStore, RPC } from '../../src/cluster/index.js';
import { crc32c, decodeBatch, encodeBatch, Engine, isFlowError, type AppendResult } from '../../src/core/index.js';
import { LogManager } from '../../src/storage/log/index.js';
import { PostgresMetastore } from '../../src/storage/metastore/index.js';
import { FsObjectStore } from '../../src/storage/objects/index.js';
import { PostgresWal, type WalEntry, type WriteAheadLog } from '../../src/storage/wal/index.js';
import { packBuffers } from '../../src/cluster/wire.js';
import { startPostgres, type PostgresServer } from '../helpers/postgres.js';

const logger = pino({ level: process.env.LOG_LEVEL ?? 'silent' });
const LEASE = 60_000;
let server: PostgresServer;
let root = '';
before(async () => {
  server = await startPostgres();
  root = mkdtempSync(join(tmpdir(), 'flowmq-cluster-streams-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

/** A WAL whose appends can be held back (to see what waits for durability). */
class GatedWal {
  gate: Promise<void> | null = null;
  constructor(readonly inner: PostgresWal) {}
  wrap(): WriteAheadLog {
    const inner = this.inner;
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    return new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === 'append') {
          return (e: WalEntry) => {
            const g = self.gate;
            const p = target.append(e);
            return g === null ? p : p.then(() => g);
          };
        }
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
  }
}

interface Node {
  id: number;
  cluster: Cluster;
  log: LogManager;
  streams: ClusterStreams;
  engine: Engine;
  wal: PostgresWal;
  gated: GatedWal;
  metastore: PostgresMetastore;
  close(): Promise<void>;
  /** Stops heartbeats and the channel without handing anything over (a paused or dead process). */
  freeze(): void;
}

async function startNode(env: { url: string; objects: string; store: MemoryClusterStore; hub: LocalHub }, id: number): Promise<Node> {
  const metastore = await PostgresMetastore.open({ url: env.url, connectTimeoutMs: 2000 });
  const wal = await PostgresWal.open({ url: env.url, connectTimeoutMs: 2000 });
  const gated = new GatedWal(wal);
  const cluster = await Cluster.start({ store: env.store, info: { id, version: 'test', endpoints: {} }, leaseMs: LEASE, logger });
  cluster.channel = env.hub.channel(id);
  const log = await LogManager.open({
    wal: gated.wrap(),
    objects: new FsObjectStore(env.objects),
    metastore,
    logger,
    owned: true,
    options: { checkIntervalMs: 50, segmentBytes: 1 << 20, segmentMs: 3_600_000 },
  });
  const streams = await ClusterStreams.start({ log, cluster, catalog: metastore, logger });
  const engine = new Engine(streams, metastore);
  streams.attach((defs) => engine.syncStreams(defs));
  await engine.load();
  log.finishRecovery();
  cluster.begin();
  let closed = false;
  return {
    id,
    cluster,
    log,
    streams,
    engine,
    wal,
    gated,
    metastore,
    async close() {
      if (closed) return;
      closed = true;
      await cluster.close();
      streams.close();
      await log.close(0);
      await wal.close();
      await metastore.close();
    },
    freeze() {
      const c = cluster as unknown as { heartbeatTimer: NodeJS.Timeout | null; started: boolean };
      if (c.heartbeatTimer) clearInterval(c.heartbeatTimer);
      c.started = false;
      env.hub.disconnect(id);
    },
  };
}

async function env() {
  return { url: await server.createDatabase(), objects: mkdtempSync(join(root, 'objects-')), store: new MemoryClusterStore(), hub: new LocalHub() };
}

async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Reconciles every node until each partition of `stream` is owned by the broker placement gives it. */
async function settle(nodes: Node[], stream: string, partitions: number): Promise<void> {
  await until(async () => {
    for (const n of nodes) n.cluster.kick();
    await new Promise((r) => setTimeout(r, 20));
    for (let p = 0; p < partitions; p++) {
      const home = nodes[0].cluster.placement('partition', `${stream}/${p}`);
      const n = nodes.find((x) => x.id === home);
      if (!n || !n.log.holds(stream, p) || n.cluster.owns('partition', `${stream}/${p}`) === null) return false;
      if (nodes.some((x) => x !== n && x.log.holds(stream, p))) return false;
    }
    return true;
  }, `partitions of ${stream} to settle`);
}

const batch = (values: string[]) => encodeBatch(values.map((v) => ({ key: null, value: Buffer.from(v), headers: [], timestamp: Date.now() })));

/** A batch of `n` records from producer `pid`/`epoch` starting at sequence `seq`. */
function idemBatch(pid: number, epoch: number, seq: number, values: string[]): Buffer {
  const b = batch(values);
  b.writeBigInt64BE(BigInt(pid), 43);
  b.writeInt16BE(epoch, 51);
  b.writeInt32BE(seq, 53);
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

async function offsetOf(r: AppendResult): Promise<number> {
  await r.durable;
  return r.offset !== undefined ? r.offset : r.baseOffset;
}

/** Every record of a partition, read through `engine` (from any broker): [offset, value]. */
async function readAll(engine: Engine, stream: string, partition: number): Promise<Array<[number, string]>> {
  const out: Array<[number, string]> = [];
  let offset = 0;
  for (;;) {
    const batches = await engine.read(stream, partition, offset, 1 << 20);
    if (batches.length === 0) return out;
    for (const b of batches) {
      for (const r of decodeBatch(b)) {
        if (r.offset >= offset) out.push([r.offset, r.value!.toString()]);
        offset = r.offset + 1;
      }
    }
  }
}

describe('cluster streams: partitions owned across brokers', () => {
  it('hands partitions over without losing anything acknowledged, offsets contiguous, while producing on both brokers', async () => {
    const e = await env();
    const a = await startNode(e, 1);
    let b: Node | null = null;
    try {
      await a.engine.createStream({ name: 'handover', partitions: 6 });
      await settle([a], 'handover', 6);
      const acked = new Map<number, Array<[number, string]>>();
      const produce = async (n: Node, p: number, v: string) => {
        const off = await offsetOf(n.engine.produce('handover', p, batch([v])));
        const list = acked.get(p) ?? [];
        list.push([off, v]);
        acked.set(p, list);
      };
      for (let p = 0; p < 6; p++) for (let i = 0; i < 5; i++) await produce(a, p, `a${p}-${i}`);
      // Broker 2 joins while broker 1 keeps producing: part of the partitions move to it.
      const running = (async () => {
        for (let i = 5; i < 40; i++) await Promise.all(Array.from({ length: 6 }, (_, p) => produce(a, p, `a${p}-${i}`)));
      })();
      b = await startNode(e, 2);
      await settle([a, b], 'handover', 6);
      await running;
      const moved = Array.from({ length: 6 }, (_, p) => p).filter((p) => b!.log.holds('handover', p));
      assert.ok(moved.length > 0 && moved.length < 6, `broker 2 took part of the partitions (${moved})`);
      assert.ok(b.log.stats.recoveredBatches > 0, 'broker 2 read back what broker 1 left in the WAL');
      // Both brokers produce to every partition, local or forwarded.
      for (let p = 0; p < 6; p++) {
        await produce(a, p, `a${p}-end`);
        await produce(b, p, `b${p}-end`);
      }
      assert.ok(a.streams.stats.forwardedAppends > 0 && b.streams.stats.forwardedAppends > 0);
      for (let p = 0; p < 6; p++) {
        const want = acked.get(p)!.sort((x, y) => x[0] - y[0]);
        assert.deepEqual(
          want.map(([o]) => o),
          want.map((_, i) => i),
          `partition ${p}: acknowledged offsets are contiguous from 0`,
        );
        assert.deepEqual(await readAll(a.engine, 'handover', p), want, `partition ${p} read on broker 1`);
        assert.deepEqual(await readAll(b.engine, 'handover', p), want, `partition ${p} read on broker 2`);
        // offsets() is synchronous: a remote partition's come from what its owner pushes.
        for (const n of [a, b]) {
          await until(() => n.engine.offsets('handover', p).highWatermark === want.length, `broker ${n.id} to see partition ${p}'s offsets`, 5000);
        }
      }
    } finally {
      await b?.close();
      await a.close();
    }
  });

  it('keeps the order of pipelined appends per partition while owners change (forwarded, parked, local)', async () => {
    const e = await env();
    const a = await startNode(e, 1);
    let b: Node | null = await startNode(e, 2);
    let c: Node | null = null;
    const P = 8;
    // Per partition, the appends broker 1 made, in the order made: [value, offset once acknowledged].
    const made: Array<Array<{ v: number; r: AppendResult }>> = Array.from({ length: P }, () => []);
    const inFlight: number[] = Array.from({ length: P }, () => 0);
    let producing = true;
    try {
      await a.engine.createStream({ name: 'order', partitions: P });
      await settle([a, b], 'order', P);
      // Broker 1 keeps many appends in flight to every partition (pipelined, a few per tick), owned here or elsewhere.
      const running = (async () => {
        let n = 0;
        while (producing) {
          for (let p = 0; p < P; p++) {
            if (inFlight[p] >= 64) continue;
            for (let k = 0; k < 3; k++) {
              const v = n++;
              const r = a.engine.produce('order', p, batch([String(v)]));
              inFlight[p]++;
              const done = () => void inFlight[p]--;
              r.durable.then(done, done);
              made[p].push({ v, r });
            }
          }
          await new Promise((res) => setImmediate(res));
        }
      })();
      // Owners change three times while the appends flow: broker 3 joins, broker 2 leaves, broker 2 comes back.
      await new Promise((res) => setTimeout(res, 100));
      c = await startNode(e, 3);
      await settle([a, b, c], 'order', P);
      await new Promise((res) => setTimeout(res, 100));
      await b.close();
      b = null;
      await settle([a, c], 'order', P);
      await new Promise((res) => setTimeout(res, 100));
      b = await startNode(e, 2);
      await settle([a, b, c], 'order', P);
      await new Promise((res) => setTimeout(res, 100));
      producing = false;
      await running;
      const problems: string[] = [];
      let total = 0;
      for (let p = 0; p < P; p++) {
        const offsets = await Promise.all(made[p].map((x) => offsetOf(x.r).catch(() => null)));
        const acked = made[p].map((x, i) => [x.v, offsets[i]] as const).filter((x): x is readonly [number, number] => x[1] !== null);
        total += acked.length;
        assert.ok(acked.length > 0, `partition ${p}: appends acknowledged`);
        const wrong = acked.filter((x, i) => i > 0 && x[1] <= acked[i - 1][1]).length;
        // What is stored follows the order the appends were made (a retried one may come twice: its first copy counts).
        const stored = (await readAll(a.engine, 'order', p)).map(([, v]) => Number(v));
        const seen = new Set<number>();
        const first = stored.filter((v) => !seen.has(v) && seen.add(v) !== undefined);
        const behind = first.filter((v, i) => i > 0 && v < first[i - 1]).length;
        if (wrong > 0 || behind > 0)
          problems.push(`partition ${p}: ${wrong} of ${acked.length} acknowledged at or below the one made before; ${behind} stored behind a later one`);
      }
      const retries = a.streams.stats.forwardRetries;
      console.log(`order: ${total} acknowledged, ${retries} forwarded retries, ${a.streams.stats.forwardRequests} requests`);
      assert.ok(retries > 0, 'appends in flight met a change of owner');
      assert.deepEqual(problems, [], `order broken (${total} acknowledged, ${retries} forwarded retries)`);
    } finally {
      producing = false;
      await c?.close();
      await b?.close();
      await a.close();
    }
  });

  it('an owner takes a forwarded append only after the one sent before it, during its current ownership', async () => {
    const e = await env();
    const b = await startNode(e, 2);
    const peer = e.hub.channel(9); // a forwarding broker, seen from broker 2's end of the channel
    try {
      await b.engine.createStream({ name: 'chain', partitions: 1 });
      await settle([b], 'chain', 1);
      const send = async (heads: Array<[number, number] | null>, values: string[]) => {
        const head = heads.map((h): [string, number, number?, number?] => (h === null ? ['chain', 0] : ['chain', 0, h[0], h[1]]));
        const r = await call(peer, 2, RPC.streamAppend, head, { tail: packBuffers(values.map((v) => batch([v]))) });
        return r.head.map((a) => ('o' in a ? a.o : a.e));
      };
      // The first of a run (-1: nothing of it in flight) is taken; the next names it.
      assert.deepEqual(
        await send(
          [
            [100, -1],
            [101, 100],
          ],
          ['a', 'b'],
        ),
        [0, 1],
      );
      // One whose previous append was not taken here (refused, or sent elsewhere) is refused, and so is what follows it.
      assert.deepEqual(
        await send(
          [
            [103, 102],
            [104, 103],
          ],
          ['d', 'e'],
        ),
        ['UNAVAILABLE', 'UNAVAILABLE'],
      );
      // Sent again in order, from the one that was missing.
      assert.deepEqual(
        await send(
          [
            [102, 101],
            [103, 102],
            [104, 103],
          ],
          ['c', 'd', 'e'],
        ),
        [2, 3, 4],
      );
      // Another forwarding broker's numbers are its own.
      assert.deepEqual(
        await call(e.hub.channel(8), 2, RPC.streamAppend, [['chain', 0, 104, 103]], { tail: packBuffers([batch(['x'])]) }).then((r) =>
          r.head.map((a) => ('o' in a ? a.o : a.e)),
        ),
        ['UNAVAILABLE'],
      );
      // A head of channel version 2 (no numbers) is taken as before.
      assert.deepEqual(await send([null], ['f']), [5]);
      // A new ownership forgets what the previous one took: the run starts again with -1.
      await b.cluster.release('partition', 'chain/0');
      await settle([b], 'chain', 1);
      assert.deepEqual(await send([[105, 104]], ['g']), ['UNAVAILABLE']);
      assert.deepEqual(
        await send(
          [
            [105, -1],
            [106, 105],
          ],
          ['g', 'h'],
        ),
        [6, 7],
      );
      assert.deepEqual(
        (await readAll(b.engine, 'chain', 0)).map(([, v]) => v),
        ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'],
      );
    } finally {
      await peer.close();
      await b.close();
    }
  });

  it('a forwarded append settles only once the owner made it durable', async () => {
    const e = await env();
    const a = await startNode(e, 1);
    const b = await startNode(e, 2);
    try {
      await a.engine.createStream({ name: 'fwd', partitions: 8 });
      await settle([a, b], 'fwd', 8);
      const p = Array.from({ length: 8 }, (_, i) => i).find((i) => b.log.holds('fwd', i));
      assert.notEqual(p, undefined, 'broker 2 owns a partition');
      // Broker 2's WAL holds its appends back until the gate opens.
      let open!: () => void;
      b.gated.gate = new Promise<void>((r) => (open = r));
      const before = b.log.offsets('fwd', p!).highWatermark;
      const r = a.engine.produce('fwd', p!, batch(['held']));
      assert.equal(r.baseOffset, -1, 'a forwarded append has no synchronous offset');
      let settled = false;
      void r.durable.then(() => (settled = true));
      // The owner appended it (its tail has it) but its WAL has not said durable.
      await until(() => (b.log.describe('fwd').find((x) => x.partition === p)?.tailBytes ?? 0) > 0, 'the owner to append');
      await new Promise((res) => setImmediate(res));
      assert.equal(settled, false, 'not settled while the owner has not made it durable');
      assert.equal(b.log.offsets('fwd', p!).highWatermark, before);
      b.gated.gate = null;
      open();
      assert.equal(await r.offset, before);
      await r.durable;
      assert.equal(settled, true);
      assert.ok(b.log.offsets('fwd', p!).highWatermark > before);
      assert.deepEqual(await readAll(a.engine, 'fwd', p!), [[before, 'held']]);
    } finally {
      await b.close();
      await a.close();
    }
  });

  it('a forwarded append retried while its owner is still writing the first copy is stored once', async () => {
    const e = await env();
    const a = await startNode(e, 1);
    const b = await startNode(e, 2);
    try {
      await a.engine.createStream({ name: 'inflight', partitions: 8 });
      await settle([a, b], 'inflight', 8);
      const p = Array.from({ length: 8 }, (_, i) => i).find((i) => b.log.holds('inflight', i));
      assert.notEqual(p, undefined, 'broker 2 owns a partition');
      assert.equal(await offsetOf(a.engine.produce('inflight', p!, batch(['m0']))), 0);
      // Broker 2's WAL holds m1 back; the forwarder's request breaks off while it is in flight and is retried.
      let open!: () => void;
      b.gated.gate = new Promise<void>((r) => (open = r));
      let requests = 0;
      e.hub.breakInFlight = (from, to, method) => method === 'stream.append' && from === 1 && to === 2 && requests++ === 0;
      const r1 = a.engine.produce('inflight', p!, batch(['m1']));
      await until(() => requests >= 2, 'the retry to reach the owner');
      b.gated.gate = null;
      open();
      assert.equal(await offsetOf(r1), 1, "the retry is answered with the first copy's offset");
      assert.ok(b.log.stats.duplicateAppends >= 1, 'the retry was recognised as a duplicate');
      assert.equal(await offsetOf(a.engine.produce('inflight', p!, batch(['m2']))), 2);
      assert.deepEqual(await readAll(a.engine, 'inflight', p!), [
        [0, 'm0'],
        [1, 'm1'],
        [2, 'm2'],
      ]);
    } finally {
      e.hub.breakInFlight = null;
      await b.close();
      await a.close();
    }
  });

  it('a forwarded append stored by its owner whose reply was lost is stored once: retried at the same owner, and at the next one after it died', async () => {
    const e = await env();
    const a = await startNode(e, 1);
    const b = await startNode(e, 2);
    try {
      await a.engine.createStream({ name: 'once', partitions: 8 });
      await settle([a, b], 'once', 8);
      const ps = [0, 1, 2, 3, 4, 5, 6, 7].filter((i) => b.log.holds('once', i));
      assert.ok(ps.length >= 1, 'broker 2 owns a partition');
      const p = ps[0];
      assert.equal(await offsetOf(a.engine.produce('once', p, batch(['m0']))), 0);
      // 1. The owner stores a forwarded append, its reply is lost: the forwarder retries at the same owner.
      let lose = 1;
      e.hub.loseReply = (from, to, method) => method === 'stream.append' && from === 1 && to === 2 && lose-- > 0;
      const r1 = a.engine.produce('once', p, batch(['m1']));
      assert.equal(await offsetOf(r1), 1, "the retry is answered with the first append's offset");
      assert.equal(lose, -1, 'the reply was lost once');
      assert.equal(await offsetOf(a.engine.produce('once', p, batch(['m2']))), 2);
      // 2. The owner stores a forwarded append (durable in the WAL), its reply is lost and it dies at once: the next
      // owner (broker 1 itself) reads it back from the WAL, with the forwarder's sequences, and the retry is a duplicate.
      lose = 1;
      e.hub.loseReply = (from, to, method) => {
        if (method !== 'stream.append' || from !== 1 || to !== 2 || lose-- <= 0) return false;
        b.freeze();
        return true;
      };
      const r3 = a.engine.produce('once', p, batch(['m3']));
      await until(() => lose === 0, 'the owner to store m3 and die');
      assert.equal(await e.store.heartbeat(1, a.cluster.incarnation, 10 * LEASE), true);
      e.store.now = () => Date.now() + 2 * LEASE;
      await settle([a], 'once', 8);
      assert.ok(a.log.holds('once', p), 'broker 1 took the partition');
      assert.equal(await offsetOf(r3), 3, 'the retry at the next owner is answered with the offset the dead one gave');
      // The next append follows it; nothing was stored twice.
      assert.equal(await offsetOf(a.engine.produce('once', p, batch(['m4']))), 4);
      assert.deepEqual(await readAll(a.engine, 'once', p), [
        [0, 'm0'],
        [1, 'm1'],
        [2, 'm2'],
        [3, 'm3'],
        [4, 'm4'],
      ]);
      assert.ok(a.log.stats.duplicateAppends + b.log.stats.duplicateAppends >= 2, 'both retries were recognised as duplicates');
    } finally {
      e.hub.loseReply = null;
      await b.close().catch(() => undefined);
      await a.close();
    }
  });

  it("a paused owner is fenced; its successor serves what it left in the WAL, with the idempotent producer's state", async () => {
    const e = await env();
    const a = await startNode(e, 1);
    const b = await startNode(e, 2);
    try {
      await a.engine.createStream({ name: 'fence', partitions: 8 });
      await settle([a, b], 'fence', 8);
      const p = [0, 1, 2, 3, 4, 5, 6, 7].find((i) => b.log.holds('fence', i))!;
      assert.notEqual(p, undefined);
      // Broker 2 acknowledges records (never sealed: segments are 1 MiB, an hour), one batch from an idempotent
      // producer, then pauses past its lease.
      assert.equal(await offsetOf(b.engine.produce('fence', p, batch(['x0', 'x1']))), 0);
      assert.equal(await offsetOf(b.engine.produce('fence', p, idemBatch(7, 0, 0, ['i0', 'i1']))), 2);
      assert.equal(b.log.describe('fence').find((x) => x.partition === p)?.segments, 0);
      b.freeze();
      assert.equal(await e.store.heartbeat(1, a.cluster.incarnation, 10 * LEASE), true);
      // The store's clock moves past broker 2's lease (broker 1 renewed its own for longer).
      e.store.now = () => Date.now() + 2 * LEASE;
      await settle([a], 'fence', 8);
      assert.ok(a.log.holds('fence', p), 'broker 1 took the partition');
      // Broker 2 wakes up and appends: its WAL append is refused (FENCED), and nothing of it is readable.
      const late = b.log.append('fence', p, batch(['late']));
      await assert.rejects(late.durable, (err: unknown) => isFlowError(err, 'FENCED'));
      assert.equal(b.log.holds('fence', p), false, 'the fenced partition is let go');
      // Broker 1 serves what broker 2 acknowledged (read back from the WAL) and continues the offsets.
      assert.deepEqual(await readAll(a.engine, 'fence', p), [
        [0, 'x0'],
        [1, 'x1'],
        [2, 'i0'],
        [3, 'i1'],
      ]);
      assert.ok(a.log.stats.recoveredBatches >= 2);
      // The producer's retry of its batch is a duplicate at the new owner (same offset), its next batch follows.
      const dup = a.engine.produce('fence', p, idemBatch(7, 0, 0, ['i0', 'i1']));
      assert.equal(dup.duplicate, true);
      assert.equal(dup.baseOffset, 2);
      assert.equal(await offsetOf(a.engine.produce('fence', p, idemBatch(7, 0, 2, ['i2']))), 4);
      assert.throws(
        () => a.engine.produce('fence', p, idemBatch(7, 0, 5, ['gap'])),
        (err: unknown) => isFlowError(err, 'OUT_OF_ORDER_SEQUENCE'),
      );
    } finally {
      await b.close().catch(() => undefined);
      await a.close();
    }
  });

  it("one broker's WAL trim never deletes another broker's entries", async () => {
    const e = await env();
    const a = await startNode(e, 1);
    let b: Node | null = null;
    try {
      await a.engine.createStream({ name: 'trim', partitions: 6 });
      await settle([a], 'trim', 6);
      for (let p = 0; p < 6; p++) await offsetOf(a.engine.produce('trim', p, batch([`t${p}`])));
      b = await startNode(e, 2);
      await settle([a, b], 'trim', 6);
      const moved = [0, 1, 2, 3, 4, 5].filter((p) => b!.log.holds('trim', p));
      assert.ok(moved.length > 0);
      // Broker 1 seals what it still owns and trims its WAL: the entries of the partitions it handed over (broker 2
      // holds them unsealed) stay.
      await a.log.flushAll();
      const c = new pg.Client({ connectionString: e.url });
      await c.connect();
      try {
        const rows = await c.query<{ key: string }>('SELECT key FROM wal_entries');
        const keys = rows.rows.map((r) => r.key.replace(/@\d+\//, '/')).sort();
        assert.deepEqual(keys, moved.map((p) => `trim/${p}`).sort(), 'only the handed-over partitions remain in the WAL');
      } finally {
        await c.end();
      }
      // And broker 2 still serves them after a restart of its own (it reads them back from the WAL).
      await b.close();
      b = await startNode(e, 2);
      await settle([a, b], 'trim', 6);
      for (const p of moved) assert.deepEqual(await readAll(a.engine, 'trim', p), [[0, `t${p}`]]);
    } finally {
      await b?.close();
      await a.close();
    }
  });

  it('a stream created on one broker is usable on another at once; a deletion reaches every broker', async () => {
    const e = await env();
    const a = await startNode(e, 1);
    const b = await startNode(e, 2);
    try {
      await a.engine.createStream({ name: 'cat', partitions: 4 });
      await until(() => b.engine.getStream('cat') !== undefined, 'broker 2 to know the stream', 5000);
      const offs = await Promise.all([0, 1, 2, 3].map((p) => offsetOf(b.engine.produce('cat', p, batch([`c${p}`])))));
      assert.deepEqual(offs, [0, 0, 0, 0]);
      for (let p = 0; p < 4; p++) assert.deepEqual(await readAll(a.engine, 'cat', p), [[0, `c${p}`]]);
      // Partitions added on broker 2 are placed and usable on broker 1.
      await b.engine.addPartitions('cat', 6);
      await until(() => a.engine.getStream('cat')?.def.partitions === 6, 'broker 1 to see 6 partitions', 5000);
      assert.equal(await offsetOf(a.engine.produce('cat', 5, batch(['c5']))), 0);
      // Deleted on broker 2: broker 1 forgets it and lets its partitions go.
      await b.engine.deleteStream('cat');
      await until(() => a.engine.getStream('cat') === undefined, 'broker 1 to forget the stream', 5000);
      await until(() => !a.log.held().some((n) => n.startsWith('cat/')), 'broker 1 to let its partitions go', 5000);
      assert.equal((await e.store.owners('partition')).filter((o) => o.name.startsWith('cat/')).length, 0, 'owner rows forgotten');
    } finally {
      await b.close();
      await a.close();
    }
  });
});
