/**
 * The PostgreSQL WAL alone, without a broker: appends in the shape of storage-latency (4 keys, one entry per key
 * every 5 ms, at a fixed rate) on a durable PostgreSQL started for the run, optionally with trims every 600 ms
 * as sealing would cause, and the append → commit latency p50 / p99 / max. Separates the WAL's own tail from
 * the rest of the broker's in `npm run bench -- storage-latency`.
 *
 *   node dist/bench/pg-wal-latency.js [MB/s (30)] [trim]
 */
import { pathToFileURL } from 'node:url';
import { PostgresWal } from '../src/storage/wal/index.js';
import { startPostgres } from '../test/helpers/postgres.js';
import { percentiles, type Percentiles } from './util.js';

export async function pgWalLatency(o: {
  mbPerSec: number;
  trim: boolean;
  seconds: number;
}): Promise<{ appends: Percentiles; figures: Record<string, unknown> }> {
  const server = await startPostgres({ durable: true });
  try {
    const wal = await PostgresWal.open({ url: await server.createDatabase() });
    const tickMs = 5;
    const keys = 4;
    const data = Buffer.alloc(Math.round((o.mbPerSec * 1e6 * tickMs) / 1000 / keys), 7);
    const next = new Array<number>(keys).fill(0);
    const samples: number[] = [];
    const t0 = performance.now();
    const warmupMs = 2000;
    const end = t0 + warmupMs + o.seconds * 1000;
    // Trims keep the last 400 entries of each key, as sealing lets the log trim what is in segments.
    const trimmer = o.trim ? setInterval(() => void wal.trim((key) => Math.max(0, next[Number(key.slice(2))] - 400)).catch(() => undefined), 600) : null;
    let ticks = 0;
    await new Promise<void>((resolve) => {
      const tick = (): void => {
        if (performance.now() > end) return resolve();
        for (let k = 0; k < keys; k++) {
          const base = next[k]++;
          const at = performance.now();
          void wal.append({ key: `p/${k}`, baseOffset: base, endOffset: base + 1, epoch: 0, data }).then(() => {
            if (at - t0 >= warmupMs) samples.push(performance.now() - at);
          });
        }
        ticks++;
        setTimeout(tick, Math.max(0, t0 + ticks * tickMs - performance.now()));
      };
      tick();
    });
    if (trimmer) clearInterval(trimmer);
    await wal.close(); // finishes the appends already accepted
    return { appends: percentiles(samples), figures: wal.figures() };
  } finally {
    await server.stop();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const mbPerSec = Number(process.argv[2] ?? 30);
  const trim = process.argv.includes('trim');
  const r = await pgWalLatency({ mbPerSec, trim, seconds: 10 });
  console.log(
    `PostgresWal at ${mbPerSec} MB/s${trim ? ', trims every 600 ms' : ''}: ${r.appends.count} appends, append → commit p50 ${r.appends.p50.toFixed(1)} / p99 ${r.appends.p99.toFixed(1)} / max ${r.appends.max.toFixed(1)} ms; ${String(r.figures.commits)} commits`,
  );
}
