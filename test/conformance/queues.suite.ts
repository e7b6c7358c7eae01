/**
 * What every QueueStore backend must do (src/core/queues.ts). `open(dir)` opens (or reopens) the store kept in
 * `dir`; `durable` says whether a reopened store must still hold what was written (false for in-memory ones).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError, type QueueStore, type StoredQueueMessage } from '../../src/core/index.js';

const body = (id: number, size = 16): Buffer => {
  const b = Buffer.alloc(size, id % 251);
  b.writeUInt32BE(id, 0);
  return b;
};
const msgs = (from: number, to: number, size = 16) => {
  const out: Array<{ id: number; data: Buffer }> = [];
  for (let id = from; id <= to; id++) out.push({ id, data: body(id, size) });
  return out;
};
const ids = (rows: StoredQueueMessage[]) => rows.map((r) => r.id);

export function queueStoreConformance(name: string, durable: boolean, open: (dir: string) => Promise<QueueStore>): void {
  describe(`QueueStore conformance: ${name}`, () => {
    let root = '';
    let n = 0;
    const freshDir = (): string => join(root, `case-${n++}`);
    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'flowmq-queues-conformance-'));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('has a kind; a new queue opens empty, and opening is idempotent', async () => {
      const s = await open(freshDir());
      assert.ok(s.kind.length > 0);
      assert.deepEqual(await s.openQueue('q'), { count: 0, bytes: 0, maxId: 0 });
      assert.deepEqual(await s.openQueue('q'), { count: 0, bytes: 0, maxId: 0 });
      assert.deepEqual(await s.read('q', 0, 10), []);
      await s.close();
    });

    it('appends and reads back in id order, from an id, up to a limit, bodies intact', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      await s.append('q', msgs(1, 5));
      await s.append('q', msgs(6, 10, 3000));
      const all = await s.read('q', 0, 100);
      assert.deepEqual(ids(all), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      for (const r of all) {
        assert.deepEqual(r.data, body(r.id, r.id <= 5 ? 16 : 3000));
        assert.equal(r.deliveries, 0);
      }
      assert.deepEqual(ids(await s.read('q', 4, 3)), [4, 5, 6]);
      assert.deepEqual(ids(await s.read('q', 11, 3)), []);
      assert.deepEqual(ids(await s.read('q', 0, 0)), []);
      await s.close();
    });

    it('keeps count, bytes and the highest id in step with appends and removals (ids not present are ignored)', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      await s.append('q', msgs(1, 10, 100));
      assert.deepEqual(await s.openQueue('q'), { count: 10, bytes: 1000, maxId: 10 });
      await s.remove('q', [2, 4, 4, 99, 6]);
      assert.deepEqual(await s.openQueue('q'), { count: 7, bytes: 700, maxId: 10 });
      assert.deepEqual(ids(await s.read('q', 0, 100)), [1, 3, 5, 7, 8, 9, 10]);
      await s.remove('q', [10]);
      assert.deepEqual(await s.openQueue('q'), { count: 6, bytes: 600, maxId: 10 }, 'the highest id ever appended stays');
      await s.remove('absent', [1]);
      await s.append('q', []);
      await s.remove('q', []);
      await s.close();
    });

    it('an append of ids already stored leaves them as they are (a retried append)', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      await s.append('q', msgs(1, 3));
      await s.setDeliveries('q', 2, 5);
      await s.append('q', [...msgs(2, 3), ...msgs(4, 4)]);
      assert.deepEqual(await s.openQueue('q'), { count: 4, bytes: 64, maxId: 4 });
      const rows = await s.read('q', 0, 10);
      assert.deepEqual(ids(rows), [1, 2, 3, 4]);
      assert.equal(rows[1].deliveries, 5);
      await s.close();
    });

    it('records delivery counts', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      await s.append('q', msgs(1, 3));
      await s.setDeliveries('q', 2, 1);
      await s.setDeliveries('q', 2, 3);
      await s.setDeliveries('q', 77, 3); // absent: ignored
      const rows = await s.read('q', 0, 10);
      assert.deepEqual(
        rows.map((r) => [r.id, r.deliveries]),
        [
          [1, 0],
          [2, 3],
          [3, 0],
        ],
      );
      await s.close();
    });

    it('purges a queue (returning how many it held) and keeps using it; the highest id stays', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      await s.openQueue('other');
      await s.append('q', msgs(1, 7));
      await s.append('other', msgs(1, 2));
      assert.equal(await s.purge('q'), 7);
      assert.deepEqual(await s.openQueue('q'), { count: 0, bytes: 0, maxId: 7 });
      assert.deepEqual(await s.read('q', 0, 10), []);
      assert.equal(await s.purge('q'), 0);
      assert.equal(await s.purge('never-opened'), 0);
      await s.append('q', msgs(8, 9));
      assert.deepEqual(ids(await s.read('q', 0, 10)), [8, 9]);
      assert.deepEqual(ids(await s.read('other', 0, 10)), [1, 2], 'other queues untouched');
      await s.close();
    });

    it('drops a queue with its messages; the same name then starts afresh', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      await s.append('q', msgs(1, 5));
      await s.dropQueue('q');
      await s.dropQueue('q');
      await s.dropQueue('never-opened');
      assert.deepEqual(await s.openQueue('q'), { count: 0, bytes: 0, maxId: 0 });
      assert.deepEqual(await s.read('q', 0, 10), []);
      await s.close();
    });

    it('keeps queues apart, whatever their names', async () => {
      const s = await open(freshDir());
      const names = ['a', 'ab', 'a.b', 'a/b', 'ünï cødé ✓', '', 'x'.repeat(255)];
      for (const [i, q] of names.entries()) {
        await s.openQueue(q);
        await s.append(q, msgs(1, i + 1));
      }
      for (const [i, q] of names.entries()) {
        assert.equal((await s.read(q, 0, 100)).length, i + 1, q);
        assert.equal((await s.openQueue(q)).count, i + 1, q);
      }
      await s.close();
    });

    it('calls on a queue take effect in the order they were made, awaited or not', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      const ops: Promise<unknown>[] = [];
      ops.push(s.append('q', msgs(1, 3)));
      ops.push(s.remove('q', [2]));
      ops.push(s.setDeliveries('q', 3, 2));
      const r1 = s.read('q', 0, 10);
      ops.push(s.append('q', msgs(4, 4)));
      const purged = s.purge('q');
      ops.push(s.append('q', msgs(5, 6)));
      const r2 = s.read('q', 0, 10);
      const counters = s.openQueue('q');
      await Promise.all(ops);
      assert.deepEqual(
        (await r1).map((r) => [r.id, r.deliveries]),
        [
          [1, 0],
          [3, 2],
        ],
      );
      assert.equal(await purged, 3);
      assert.deepEqual(ids(await r2), [5, 6]);
      assert.deepEqual(await counters, { count: 2, bytes: 32, maxId: 6 });
      await s.close();
    });

    it('groups the calls made together into few commits', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      const before = Number(s.figures?.().commits ?? 0);
      const ops: Promise<void>[] = [];
      for (let i = 1; i <= 1000; i++) ops.push(s.append('q', [{ id: i, data: body(i) }]));
      await Promise.all(ops);
      const commits = Number(s.figures?.().commits ?? 0) - before;
      assert.ok(commits >= 1 && commits <= 10, `1000 appends made in one tick took ${commits} commits`);
      assert.equal((await s.openQueue('q')).count, 1000);
      await s.close();
    });

    it('takes large messages and long queues, reading them page by page', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      const big = Buffer.alloc(2 * 1024 * 1024, 7);
      await s.append('q', [{ id: 1, data: big }]);
      await s.append('q', msgs(2, 5001, 64));
      const [first] = await s.read('q', 1, 1);
      assert.ok(first.data.equals(big));
      let from = 2;
      let seen = 0;
      for (;;) {
        const page = await s.read('q', from, 700);
        if (page.length === 0) break;
        for (const r of page) assert.equal(r.data.readUInt32BE(0), r.id);
        seen += page.length;
        from = page[page.length - 1].id + 1;
      }
      assert.equal(seen, 5000);
      assert.deepEqual(await s.openQueue('q'), { count: 5001, bytes: big.length + 5000 * 64, maxId: 5001 });
      await s.close();
    });

    it('dropQueues drops every queue whose name starts with the prefix (appended to without an open too), and no other', async () => {
      const s = await open(freshDir());
      const gone = ['amq.page.1.1.a', 'amq.page.1.2.b', 'amq.page.1.3.é✓', 'x%_.1'];
      const kept = ['amq.page.12.1.a', 'amq.page.1x', 'amq.page.1', 'plain', 'xab.1'];
      for (const q of [...gone, ...kept]) await s.append(q, msgs(1, 3));
      await s.openQueue('amq.page.1.4.opened');
      assert.equal(await s.dropQueues!('amq.page.1.'), 4);
      // Characters LIKE would take as wildcards are plain characters of the prefix.
      assert.equal(await s.dropQueues!('x%_.'), 1);
      for (const q of gone) {
        assert.deepEqual(await s.openQueue(q), { count: 0, bytes: 0, maxId: 0 }, q);
        assert.deepEqual(await s.read(q, 0, 10), [], q);
      }
      for (const q of kept) {
        assert.deepEqual(await s.openQueue(q), { count: 3, bytes: 48, maxId: 3 }, q);
        assert.deepEqual(ids(await s.read(q, 0, 10)), [1, 2, 3], q);
      }
      await s.close();
    });

    it('refuses calls after close with CLOSED', async () => {
      const s = await open(freshDir());
      await s.openQueue('q');
      await s.close();
      await s.close();
      await assert.rejects(s.append('q', msgs(1, 1)), (e: unknown) => isFlowError(e) && e.code === 'CLOSED');
      await assert.rejects(s.read('q', 0, 1), (e: unknown) => isFlowError(e) && e.code === 'CLOSED');
    });

    it('close finishes the calls already made', async () => {
      const dir = freshDir();
      const s = await open(dir);
      await s.openQueue('q');
      const ops = [s.append('q', msgs(1, 100)), s.remove('q', [1])];
      await s.close();
      await Promise.all(ops);
      if (!durable) return;
      const s2 = await open(dir);
      assert.equal((await s2.openQueue('q')).count, 99);
      await s2.close();
    });

    if (durable) {
      it('keeps messages, delivery counts and counters across reopen', async () => {
        const dir = freshDir();
        const s = await open(dir);
        await s.openQueue('q');
        await s.openQueue('empty');
        await s.append('q', msgs(1, 20, 50));
        await s.remove('q', [1, 2, 3]);
        await s.setDeliveries('q', 4, 2);
        await s.close();

        const s2 = await open(dir);
        assert.deepEqual(await s2.openQueue('q'), { count: 17, bytes: 850, maxId: 20 });
        assert.deepEqual(await s2.openQueue('empty'), { count: 0, bytes: 0, maxId: 0 });
        const rows = await s2.read('q', 0, 100);
        assert.deepEqual(
          ids(rows),
          Array.from({ length: 17 }, (_, i) => i + 4),
        );
        assert.equal(rows[0].deliveries, 2);
        assert.deepEqual(rows[5].data, body(9, 50));
        await s2.append('q', msgs(21, 21, 50));
        assert.equal((await s2.openQueue('q')).count, 18);
        await s2.close();
      });
    }
  });
}
