/** The PostgreSQL QueueStore beyond the conformance suite: the server going away and coming back. */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { isFlowError } from '../../../src/core/index.js';
import { PostgresQueueStore } from '../../../src/storage/queues/index.js';
import { startPostgres, type PostgresServer } from '../../helpers/postgres.js';

const msgs = (from: number, to: number) => {
  const out: Array<{ id: number; data: Buffer }> = [];
  for (let id = from; id <= to; id++) out.push({ id, data: Buffer.from(`m${id}`) });
  return out;
};

describe('PostgresQueueStore', () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server.stop();
  });

  it('a server outage fails the calls made during it with STORAGE_ERROR; once it is back, calls succeed and nothing resolved is lost', async () => {
    const s = await PostgresQueueStore.open({ url: await server.createDatabase(), connectTimeoutMs: 2000 });
    await s.openQueue('q');
    await s.append('q', msgs(1, 10));
    await server.stopServer();
    const during = [s.append('q', msgs(11, 12)), s.remove('q', [1]), s.read('q', 0, 10)];
    for (const p of during) await assert.rejects(p, (e: unknown) => isFlowError(e) && e.code === 'STORAGE_ERROR');
    await server.startServer();
    // The pool reconnects by itself; the failed calls are retried as a caller would.
    await s.append('q', msgs(11, 12));
    await s.remove('q', [1]);
    assert.deepEqual(
      (await s.read('q', 0, 100)).map((r) => r.id),
      [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
    );
    assert.deepEqual(await s.openQueue('q'), { count: 11, bytes: 2 * 8 + 3 * 3, maxId: 12 });
    assert.ok(Number(s.figures().failedGroups) >= 1);
    await s.close();
  });

  it('runs the calls of one group as one transaction: a failing one fails them all, changing nothing', async () => {
    const s = await PostgresQueueStore.open({ url: await server.createDatabase() });
    await s.openQueue('q');
    await s.append('q', msgs(1, 3));
    // A body over PostgreSQL's 1 GB field limit cannot be built here; an id beyond bigint is refused before
    // sending, so the failure is made by the server: a queue name with a NUL byte is invalid text there.
    const a = s.append('q', msgs(4, 5));
    const bad = s.append('bad\u0000name', msgs(1, 1));
    const r = s.remove('q', [1]);
    await assert.rejects(bad, (e: unknown) => isFlowError(e) && e.code === 'STORAGE_ERROR');
    await assert.rejects(a, (e: unknown) => isFlowError(e) && e.code === 'STORAGE_ERROR');
    await assert.rejects(r, (e: unknown) => isFlowError(e) && e.code === 'STORAGE_ERROR');
    assert.deepEqual(await s.openQueue('q'), { count: 3, bytes: 6, maxId: 3 });
    await s.close();
  });
});
