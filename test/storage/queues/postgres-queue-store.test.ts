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

  it('does not write messages removed before their append was written (acked before the write was due), keeps their ids counted, and leaves those a read made before the removal must see', async () => {
    const url = await server.createDatabase();
    const s = await PostgresQueueStore.open({ url });
    await s.openQueue('q');
    await s.append('q', msgs(1, 2));
    // One tick: the appends of 3..6 and the removal of 4, 6 and of 1 (written already) wait for one group.
    const appended = s.append('q', msgs(3, 6));
    const removed = s.remove('q', [1, 4, 6]);
    await Promise.all([appended, removed]);
    assert.equal(s.figures().elided, 2);
    assert.deepEqual(
      (await s.read('q', 0, 100)).map((m) => m.id),
      [2, 3, 5],
    );
    // An append all of whose messages are removed before it is written: nothing is inserted, the highest id counts it.
    await Promise.all([s.append('q', msgs(7, 7)), s.remove('q', [7])]);
    assert.equal(s.figures().elided, 3);
    // A read made between the append and the removal sees the message: it is written, then removed.
    const [, seen] = await Promise.all([s.append('q', msgs(8, 8)), s.read('q', 0, 100), s.remove('q', [8])]);
    assert.deepEqual(
      seen.map((m) => m.id),
      [2, 3, 5, 8],
    );
    assert.equal(s.figures().elided, 3);
    await s.close();
    // What PostgreSQL holds: the counters match the rows, and the highest id counts 7 and 8 (never reused).
    const again = await PostgresQueueStore.open({ url });
    assert.deepEqual(await again.openQueue('q'), { count: 3, bytes: 6, maxId: 8 });
    assert.deepEqual(
      (await again.read('q', 0, 100)).map((m) => m.id),
      [2, 3, 5],
    );
    await again.close();
  });
});

/** Issue 24: a queue flooded with appends does not make another queue's appends wait behind its whole backlog. */
describe('PostgresQueueStore fair group commits', () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server.stop();
  });

  const body = (i: number) => {
    const b = Buffer.alloc(1024, 0x66);
    b.write(`f${i}`);
    return b;
  };

  it("an append of a light queue made after a flood's backlog commits before most of it", async () => {
    const s = await PostgresQueueStore.open({ url: await server.createDatabase() });
    await s.openQueue('flood');
    await s.openQueue('light');
    // 3,000 appends of 1 KiB without waiting (3 MiB: first come first served ran them as one group), then one of
    // the light queue, in the same tick. Calls resolve in their group's order, groups in commit order.
    const order: string[] = [];
    const flood = 3000;
    const calls: Array<Promise<void>> = [];
    for (let i = 1; i <= flood; i++) calls.push(s.append('flood', [{ id: i, data: body(i) }]).then(() => void order.push('f')));
    calls.push(s.append('light', [{ id: 1, data: Buffer.from('light') }]).then(() => void order.push('light')));
    await Promise.all(calls);
    const before = order.indexOf('light');
    console.log(`flood appends committed before the light queue's: ${before} of ${flood}; groups: ${String(s.figures().commits)}`);
    // At most one quantum (128 KiB, ~120 appends of 1 KiB) of the flood shares the light queue's group.
    assert.ok(before >= 0 && before <= 200, `${before} flood appends committed before the light one`);
    assert.deepEqual(await s.openQueue('flood'), { count: flood, bytes: flood * 1024, maxId: flood });
    assert.deepEqual(await s.openQueue('light'), { count: 1, bytes: 5, maxId: 1 });
    // The flood's own order is kept.
    assert.deepEqual(
      (await s.read('flood', 0, flood)).map((m) => m.id),
      Array.from({ length: flood }, (_, i) => i + 1),
    );
    await s.close();
  });

  it('a light queue appending one call at a time joins the next group each time while the flood waits', async () => {
    const s = await PostgresQueueStore.open({ url: await server.createDatabase() });
    await s.openQueue('flood');
    await s.openQueue('light');
    let committed = 0;
    const flood = 6000;
    const calls: Array<Promise<void>> = [];
    for (let i = 1; i <= flood; i++) calls.push(s.append('flood', [{ id: i, data: body(i) }]).then(() => void committed++));
    // Ten appends of the light queue, each made once the previous one committed: how many flood appends
    // committed before each (first come first served: the whole backlog ahead of the first).
    const seen: number[] = [];
    for (let i = 1; i <= 10; i++) {
      await s.append('light', [{ id: i, data: Buffer.from(`l${i}`) }]);
      seen.push(committed);
    }
    await Promise.all(calls);
    console.log(`flood appends committed when each light append had: ${seen.join(' ')} (of ${flood})`);
    // The first light append is in the first group (with at most a quantum of the flood); each next one in the group
    // after (another quantum): never the flood's backlog.
    assert.ok(seen[0]! <= 200, `first light append behind ${seen[0]} flood appends`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i]! - seen[i - 1]! <= 200, `light append ${i + 1} behind ${seen[i]! - seen[i - 1]!} more`);
    assert.ok(seen[9]! < flood, 'the light queue was done before the flood');
    assert.deepEqual(await s.openQueue('flood'), { count: flood, bytes: flood * 1024, maxId: flood });
    assert.deepEqual(await s.openQueue('light'), { count: 10, bytes: 2 * 9 + 3, maxId: 10 });
    await s.close();
  });
});
