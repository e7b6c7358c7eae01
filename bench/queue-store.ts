/**
 * The QueueStore backends alone, without a broker (`npm run bench -- queue-store`): persistent 1 KiB messages
 * appended to one queue by N concurrent publishers, each waiting for its append to resolve before the next (as a
 * publisher waits for a confirm), at a few concurrency levels; then the steady state of a queue that is consumed
 * as fast as it is filled (each publisher also removes, i.e. acks, the message it appended before); then the same
 * with the ack coming before the append is durable (a consumer's ack arriving one tick after the append, as the
 * broker delivers a message before its write), which the stores elide (neither is written: `elided`, issue 28).
 * Reports appends/s and the p50 / p99 of append → resolved, for the embedded store (SQLite in a worker thread,
 * synchronous=FULL, on BENCH_DATA_DIR or the temp dir) and for PostgreSQL (a durable server started for the run:
 * fsync on).
 *
 *   node dist/bench/queue-store.js [seconds per level (3)]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { QueueStore } from '../src/core/index.js';
import { PostgresQueueStore, SqliteQueueStore } from '../src/storage/queues/index.js';
import { startPostgres } from '../test/helpers/postgres.js';
import { percentiles, type Percentiles } from './util.js';

export interface QueueStoreLevel {
  concurrency: number;
  /** Append and remove (ack) per publisher round, not appends alone. */
  withAcks: boolean;
  /** The remove is made one tick after its append, before the append has resolved (a fast consumer's ack). */
  ackBeforeWritten?: boolean;
  /** Share of the appends the store never wrote (removed while waiting for their group). */
  elidedShare?: number;
  appendsPerSec: number;
  latencyMs: Percentiles;
  meanCallsPerCommit: number;
}

export interface QueueStoreBenchOptions {
  seconds: number;
  warmupS: number;
  levels: number[];
  ackLevel: number;
  messageBytes: number;
}

export const defaultQueueStoreOptions = (seconds = 3): QueueStoreBenchOptions => ({
  seconds,
  warmupS: 0.5,
  levels: [1, 16, 256],
  ackLevel: 64,
  messageBytes: 1024,
});

/** Unresolved appends per publisher at most, in the early-ack level. */
const EARLY_WINDOW = 8;

async function level(
  store: QueueStore,
  queue: string,
  concurrency: number,
  withAcks: boolean,
  o: QueueStoreBenchOptions,
  ackBeforeWritten = false,
): Promise<QueueStoreLevel> {
  await store.openQueue(queue);
  const data = Buffer.alloc(o.messageBytes, 0x5a);
  let nextId = (await store.openQueue(queue)).maxId + 1;
  const firstId = nextId;
  const samples: number[] = [];
  const t0 = performance.now();
  const measureFrom = t0 + o.warmupS * 1000;
  const end = measureFrom + o.seconds * 1000;
  const f0 = store.figures?.() ?? {};
  let counted = 0;
  const publisher = async (): Promise<void> => {
    let previous = -1;
    while (performance.now() < end) {
      const id = nextId++;
      const at = performance.now();
      await store.append(queue, [{ id, data }]);
      const now = performance.now();
      if (at >= measureFrom) {
        samples.push(now - at);
        counted++;
      }
      if (withAcks && previous >= 0) await store.remove(queue, [previous]);
      previous = id;
    }
  };
  // Early acks: appends arrive one per tick per publisher (as a broker's arrive from its sockets, not in step with
  // the commits), at most EARLY_WINDOW unresolved each (a publisher's confirm window), and each is removed one tick
  // after it was made (the consumer's ack: the broker delivers a message before its write is durable).
  const removes: Array<Promise<void>> = [];
  const earlyPublisher = async (): Promise<void> => {
    const inFlight = new Set<Promise<void>>();
    while (performance.now() < end) {
      if (inFlight.size >= EARLY_WINDOW) {
        await Promise.race(inFlight);
        continue;
      }
      const id = nextId++;
      const at = performance.now();
      const p: Promise<void> = store.append(queue, [{ id, data }]).then(() => {
        inFlight.delete(p);
        if (at >= measureFrom) {
          samples.push(performance.now() - at);
          counted++;
        }
      });
      inFlight.add(p);
      setImmediate(() => removes.push(store.remove(queue, [id])));
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(inFlight);
  };
  await Promise.all(Array.from({ length: concurrency }, ackBeforeWritten ? earlyPublisher : publisher));
  await new Promise((r) => setImmediate(r));
  await Promise.all(removes);
  const f1 = store.figures?.() ?? {};
  const calls = Number(f1.calls ?? 0) - Number(f0.calls ?? 0);
  const commits = Number(f1.commits ?? 0) - Number(f0.commits ?? 0);
  const elided = Number(f1.elided ?? 0) - Number(f0.elided ?? 0);
  return {
    concurrency,
    withAcks: withAcks || ackBeforeWritten,
    ...(ackBeforeWritten ? { ackBeforeWritten, elidedShare: nextId > firstId ? elided / (nextId - firstId) : 0 } : {}),
    appendsPerSec: counted / o.seconds,
    latencyMs: percentiles(samples),
    meanCallsPerCommit: commits > 0 ? calls / commits : 0,
  };
}

export async function runQueueStoreBench(store: QueueStore, o: QueueStoreBenchOptions): Promise<QueueStoreLevel[]> {
  const out: QueueStoreLevel[] = [];
  for (const c of o.levels) out.push(await level(store, `bench-${c}`, c, false, o));
  out.push(await level(store, 'bench-acked', o.ackLevel, true, o));
  out.push(await level(store, 'bench-acked-early', o.ackLevel, false, o, true));
  return out;
}

export async function queueStoreEmbedded(o: QueueStoreBenchOptions): Promise<QueueStoreLevel[]> {
  const dir = mkdtempSync(join(process.env.BENCH_DATA_DIR || tmpdir(), 'flowmq-bench-queues-'));
  try {
    const store = await SqliteQueueStore.open(join(dir, 'queues.db'));
    try {
      return await runQueueStoreBench(store, o);
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function queueStorePostgres(o: QueueStoreBenchOptions): Promise<QueueStoreLevel[]> {
  const server = await startPostgres({ durable: true });
  try {
    const store = await PostgresQueueStore.open({ url: await server.createDatabase() });
    try {
      return await runQueueStoreBench(store, o);
    } finally {
      await store.close();
    }
  } finally {
    await server.stop();
  }
}

export function levelCell(l: QueueStoreLevel): string {
  const acks = l.ackBeforeWritten ? ` +early acks (${(100 * (l.elidedShare ?? 0)).toFixed(0)}% elided)` : l.withAcks ? ' +acks' : '';
  return `${l.concurrency}${acks}: ${Math.round(l.appendsPerSec)}/s, ${l.latencyMs.p50.toFixed(2)} / ${l.latencyMs.p99.toFixed(2)} ms`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const o = defaultQueueStoreOptions(Number(process.argv[2] ?? 3));
  for (const [name, run] of [
    ['embedded (SQLite worker, synchronous=FULL)', queueStoreEmbedded],
    ['PostgreSQL (fsync on)', queueStorePostgres],
  ] as const) {
    const levels = await run(o);
    console.log(`${name}:`);
    for (const l of levels) {
      console.log(
        `  ${String(l.concurrency).padStart(4)} publishers${l.ackBeforeWritten ? ' (append + early ack)' : l.withAcks ? ' (append + ack)      ' : '                     '}: ${Math.round(l.appendsPerSec).toString().padStart(7)} appends/s, ` +
          `append → resolved p50 ${l.latencyMs.p50.toFixed(2)} / p99 ${l.latencyMs.p99.toFixed(2)} / max ${l.latencyMs.max.toFixed(1)} ms, ${l.meanCallsPerCommit.toFixed(1)} calls per commit` +
          (l.ackBeforeWritten ? `, ${(100 * (l.elidedShare ?? 0)).toFixed(1)}% never written` : ''),
      );
    }
  }
}
