/**
 * The queue store's worker booted early (`flowmq start` boots it while the broker's modules load): what it emitted
 * before SqliteQueueStore took it over (its ready message, its failure) is replayed, so the store opens (or fails to)
 * exactly as with a worker of its own.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError } from '../../../src/core/index.js';
import { SqliteQueueStore } from '../../../src/storage/queues/index.js';
import { prestartQueueWorker, takeQueueWorker } from '../../../src/storage/queues/sqlite-worker-boot.js';

describe('SqliteQueueStore with a worker booted early', () => {
  let root = '';
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'flowmq-qboot-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('takes the early worker, whose ready message came before anyone listened, and works with it', { timeout: 20_000 }, async () => {
    const file = join(root, 'a', 'queues.db');
    prestartQueueWorker(file);
    // Long enough for the thread to have opened the file and sent its ready message into the keeping listeners.
    await new Promise((r) => setTimeout(r, 300));
    const s = await SqliteQueueStore.open(file);
    assert.equal(
      takeQueueWorker(file, () => undefined),
      null,
      'taken once',
    );
    await s.openQueue('q');
    await s.append('q', [{ id: 1, data: Buffer.from('x') }]);
    assert.deepEqual(
      (await s.read('q', 0, 10)).map((m) => m.id),
      [1],
    );
    await s.close();
  });

  it('an early worker that cannot open its file fails the open with STORAGE_ERROR', { timeout: 20_000 }, async () => {
    const file = join(root, 'b', 'queues.db');
    await mkdir(file, { recursive: true }); // a directory where the file should be
    prestartQueueWorker(file);
    await new Promise((r) => setTimeout(r, 300));
    await assert.rejects(SqliteQueueStore.open(file), (e: unknown) => isFlowError(e) && e.code === 'STORAGE_ERROR');
  });
});
