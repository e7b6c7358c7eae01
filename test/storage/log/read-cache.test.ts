/**
 * The log's read cache of sealed batches (LogOptions.recentBytes, recentMaxAgeMs): a batch sealed longer ago than
 * the age bound leaves memory even when the budget has room, so the cache holds what the last minutes brought; a
 * later read of it comes from the segment objects.
 */
import { afterEach, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { decodeBatch, encodeBatch } from '../../../src/core/index.js';
import type { LogOptions } from '../../../src/storage/log/index.js';
import { openFsLogEngine } from '../../helpers/log-engine.js';

const logger = pino({ level: 'silent' });
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function open(options: Partial<LogOptions>) {
  const dir = mkdtempSync(join(tmpdir(), 'flowmq-read-cache-'));
  dirs.push(dir);
  return openFsLogEngine(dir, logger, options);
}

const batch = (i: number) => encodeBatch([{ key: null, value: Buffer.alloc(1024, i), headers: [], timestamp: 1_000_000 + i }]);
const values = (batches: Buffer[]) => batches.map((b) => decodeBatch(b)[0].value![0]);

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

it('a sealed batch leaves the read cache after recentMaxAgeMs, with room left in its budget; then it is read from the objects', async () => {
  const s = await open({ recentBytes: 64 * 1024 * 1024, recentMaxAgeMs: 300 });
  try {
    await s.engine.createStream({ name: 'aged', partitions: 1 });
    for (let i = 0; i < 5; i++) await s.engine.produce('aged', 0, batch(i)).durable;
    await s.log.flushAll();
    const before = s.log.stats.objectReads;
    assert.deepEqual(values(await s.engine.read('aged', 0, 0, 1 << 20)), [0, 1, 2, 3, 4]);
    assert.equal(s.log.stats.objectReads, before, 'read from memory while recent');
    assert.ok(s.log.recentTotal > 0, 'the cache holds the sealed batches');
    // The background task lets them go once they are older than the bound (the budget is far from full).
    await until('the cache to empty', () => s.log.recentTotal === 0);
    assert.deepEqual(values(await s.engine.read('aged', 0, 0, 1 << 20)), [0, 1, 2, 3, 4]);
    assert.ok(s.log.stats.objectReads > before, 'read from the segment objects once expired');
  } finally {
    await s.close();
  }
});
