/**
 * The partition log engine on the PostgreSQL backends (metastore and WAL) with a directory object store: what a
 * stateless broker runs on. Produce, seal and trim, a restart of the broker, a restart of PostgreSQL under a
 * produce run (no acknowledged record lost, the log takes appends again by itself), and a second broker taking the
 * partitions (the first is fenced).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { decodeBatch, encodeBatch, Engine, isFlowError } from '../../../src/core/index.js';
import type { LogOptions } from '../../../src/storage/log/index.js';
import { PostgresMetastore } from '../../../src/storage/metastore/index.js';
import { FsObjectStore } from '../../../src/storage/objects/index.js';
import { PostgresWal } from '../../../src/storage/wal/index.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';
import { openLogEngine } from '../../helpers/log-engine.js';

const logger = pino({ level: process.env.LOG_LEVEL ?? 'silent' });
let server: PostgresServer;
let root = '';
before(async () => {
  server = await startPostgres();
  root = mkdtempSync(join(tmpdir(), 'flowmq-log-pg-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

async function openBroker(url: string, objectsDir: string, options: Partial<LogOptions> = {}) {
  const metastore = await PostgresMetastore.open({ url, connectTimeoutMs: 2000 });
  const wal = await PostgresWal.open({ url, connectTimeoutMs: 2000 });
  const objects = new FsObjectStore(objectsDir);
  const { log, engine } = await openLogEngine({ wal, objects, metastore }, logger, options);
  return {
    metastore,
    wal,
    log,
    engine,
    async close() {
      await log.close();
      await wal.close();
      await metastore.close();
    },
  };
}

const rec = (i: number) => ({ key: null, value: Buffer.from(`m${i}`), headers: [], timestamp: 1_000_000 + i });

async function values(engine: Engine, stream: string, partition: number): Promise<string[]> {
  const out: string[] = [];
  let offset = 0;
  for (;;) {
    const batches = await engine.read(stream, partition, offset, 1 << 20);
    if (batches.length === 0) return out;
    for (const b of batches) {
      for (const r of decodeBatch(b)) {
        if (r.offset >= offset) out.push(r.value!.toString());
        offset = r.offset + 1;
      }
    }
  }
}

async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('LogManager on PostgreSQL (metastore + WAL)', () => {
  it('produces, seals segments into objects, trims the WAL, and recovers everything after a broker restart', async () => {
    const url = await server.createDatabase();
    const objects = join(root, 'o1');
    const b = await openBroker(url, objects, { segmentBytes: 2000 });
    await b.engine.createStream({ name: 't', partitions: 2 });
    for (let i = 0; i < 60; i++) await b.engine.produce('t', i % 2, encodeBatch([rec(i)])).durable;
    // Some segments are sealed and committed; the WAL lets go of what they hold.
    await until(async () => (await b.metastore.listSegments('t', 0)).length > 0, 'a sealed segment');
    await until(() => b.wal.size() < 60 * 60, 'the WAL trimmed');
    await b.close();
    const again = await openBroker(url, objects, { segmentBytes: 2000 });
    const expect = (p: number) => Array.from({ length: 30 }, (_, k) => `m${2 * k + p}`);
    assert.deepEqual(await values(again.engine, 't', 0), expect(0));
    assert.deepEqual(await values(again.engine, 't', 1), expect(1));
    await again.close();
  });

  it('loses no acknowledged record when PostgreSQL restarts under a produce run, and takes appends again by itself', async () => {
    const url = await server.createDatabase();
    const b = await openBroker(url, join(root, 'o2'));
    await b.engine.createStream({ name: 'r', partitions: 1 });
    const acked: string[] = [];
    let stop = false;
    let failures = 0;
    let n = 0;
    // One producer that retries what failed, as Kafka clients do.
    const producer = (async () => {
      while (!stop) {
        const i = n;
        try {
          await b.engine.produce('r', 0, encodeBatch([rec(i)])).durable;
          acked.push(`m${i}`);
          n++;
        } catch (err) {
          assert.ok(isFlowError(err, 'STORAGE_ERROR'), String(err));
          failures++;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    })();
    try {
      await until(() => acked.length >= 20, 'records before the restart');
      await server.restart();
      const before = acked.length;
      await until(() => acked.length >= before + 20, 'records after the restart');
    } finally {
      stop = true;
      await producer;
    }
    assert.ok(failures > 0, 'the restart was seen');
    assert.deepEqual(await values(b.engine, 'r', 0), acked);
    await b.close();
    const again = await openBroker(url, join(root, 'o2'));
    assert.deepEqual(await values(again.engine, 'r', 0), acked);
    await again.close();
  });

  it('a second broker opening the partitions fences the first', async () => {
    const url = await server.createDatabase();
    const objects = join(root, 'o3');
    const a = await openBroker(url, objects);
    await a.engine.createStream({ name: 'f', partitions: 1 });
    await a.engine.produce('f', 0, encodeBatch([rec(0)])).durable;
    const b = await openBroker(url, objects);
    const stale = a.engine.produce('f', 0, encodeBatch([rec(1)]));
    // The WAL refuses it with FENCED (the log engine may wrap that as the cause of its own error).
    await assert.rejects(stale.durable, (e: unknown) => isFlowError(e, 'FENCED') || isFlowError((e as Error).cause, 'FENCED'));
    await b.engine.produce('f', 0, encodeBatch([rec(2)])).durable;
    assert.deepEqual(await values(b.engine, 'f', 0), ['m0', 'm2']);
    await a.close().catch(() => undefined);
    await b.close();
  });
});
