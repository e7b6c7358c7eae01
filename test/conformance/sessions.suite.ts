/**
 * What every SessionStore and RetainedStore backend must do. `open(dir)` opens (or reopens) the store kept in
 * `dir`; `durable` says whether a reopened store must still hold what was written (false for in-memory ones).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  decodeStoredMessage,
  encodeStoredMessage,
  isFlowError,
  makeMessage,
  type RetainedStore,
  type SessionRecord,
  type SessionStore,
} from '../../src/core/index.js';

export interface SessionBackend {
  sessions: SessionStore;
  retained: RetainedStore;
  close(): Promise<void>;
}

const rec = (clientId: string, over: Partial<SessionRecord> = {}): SessionRecord => ({
  clientId,
  protocol: 'mqtt',
  state: JSON.stringify({ subs: [{ f: 'a/#', q: 1 }] }),
  expiresAt: 1_700_000_000_000,
  updatedAt: 1_700_000_000_000,
  ...over,
});

const b = (s: string) => Buffer.from(s);

/** Appends entries (the plain form of updateQueue); returns how many the bound dropped. */
const enqueue = async (store: SessionStore, clientId: string, entries: Buffer[], maxLength: number): Promise<number> =>
  (await store.updateQueue(clientId, { append: entries }, maxLength)).dropped;

const queueLength = async (store: SessionStore, clientId: string): Promise<number> => (await store.readQueue(clientId, 1_000_000)).length;

export function sessionStoreConformance(name: string, durable: boolean, open: (dir: string) => Promise<SessionBackend>): void {
  describe(`SessionStore / RetainedStore conformance: ${name}`, () => {
    let root = '';
    let n = 0;
    const freshDir = (): string => join(root, `case-${n++}`);
    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'flowmq-sessions-conformance-'));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('puts, gets, replaces, lists by protocol and deletes session records', async () => {
      const s = await open(freshDir());
      assert.equal(await s.sessions.getSession('c1'), null);
      await s.sessions.putSession(rec('c1'));
      await s.sessions.putSession(rec('c2', { expiresAt: null }));
      await s.sessions.putSession(rec('k1', { protocol: 'other' }));
      assert.deepEqual(await s.sessions.getSession('c1'), rec('c1'));
      await s.sessions.putSession(rec('c1', { state: '{"x":1}', expiresAt: 5, updatedAt: 6 }));
      assert.deepEqual(await s.sessions.getSession('c1'), rec('c1', { state: '{"x":1}', expiresAt: 5, updatedAt: 6 }));
      assert.deepEqual((await s.sessions.listSessions('mqtt')).map((r) => r.clientId).sort(), ['c1', 'c2']);
      assert.equal((await s.sessions.getSession('c2'))?.expiresAt, null);
      await s.sessions.deleteSession('c1');
      await s.sessions.deleteSession('never-existed');
      assert.equal(await s.sessions.getSession('c1'), null);
      await s.close();
    });

    it("merges an append's publish-key marks in its transaction, keeps them after the entries go, drops them with the session", async () => {
      const s = await open(freshDir());
      await s.sessions.putSession(rec('mk'));
      await s.sessions.putSession(rec('plain'));
      // A session whose queue never took a keyed message has no marks.
      await enqueue(s.sessions, 'plain', [b('x')], 10);
      assert.equal((await s.sessions.getSession('plain'))?.marks, undefined);
      assert.deepEqual(await s.sessions.getSession('plain'), rec('plain'));
      // The first append of a session (its queue counter row made in the same transaction) keeps its marks.
      const { seqs } = await s.sessions.updateQueue('mk', { append: [b('1'), b('2')], marks: { '7': 3, '9': 0 } }, 10);
      await s.sessions.updateQueue('mk', { append: [b('3')], marks: { '7': 5 } }, 10);
      assert.deepEqual((await s.sessions.getSession('mk'))?.marks, { '7': 5, '9': 0 });
      // Entries removed (acknowledged): the marks stay.
      await s.sessions.updateQueue('mk', { remove: seqs }, 10);
      await s.sessions.ackQueue('mk', 1_000_000);
      assert.equal(await queueLength(s.sessions, 'mk'), 0);
      const listed = (await s.sessions.listSessions('mqtt')).find((r) => r.clientId === 'mk');
      assert.deepEqual(listed?.marks, { '7': 5, '9': 0 });
      // A rewrite of the session record leaves them too.
      await s.sessions.putSession(rec('mk', { state: '{"y":1}' }));
      assert.deepEqual((await s.sessions.getSession('mk'))?.marks, { '7': 5, '9': 0 });
      await s.sessions.deleteSession('mk');
      await s.sessions.putSession(rec('mk'));
      assert.deepEqual(await s.sessions.getSession('mk'), rec('mk'));
      await s.close();
    });

    it('queues per session in order, reads in pages, acks a prefix', async () => {
      const s = await open(freshDir());
      assert.equal(await enqueue(s.sessions, 'q', [b('1'), b('2'), b('3')], 100), 0);
      await enqueue(s.sessions, 'other', [b('x')], 100);
      assert.equal(await enqueue(s.sessions, 'q', [b('4')], 100), 0);
      assert.equal(await queueLength(s.sessions, 'q'), 4);
      const first = await s.sessions.readQueue('q', 2);
      assert.deepEqual(
        first.map((e) => e.data.toString()),
        ['1', '2'],
      );
      assert.ok(first[0].seq < first[1].seq);
      await s.sessions.ackQueue('q', first[1].seq);
      const rest = await s.sessions.readQueue('q', 10);
      assert.deepEqual(
        rest.map((e) => e.data.toString()),
        ['3', '4'],
      );
      assert.ok(rest[0].seq > first[1].seq, 'sequence numbers keep increasing');
      assert.deepEqual(
        (await s.sessions.readQueue('other', 10)).map((e) => e.data.toString()),
        ['x'],
      );
      assert.deepEqual(await s.sessions.readQueue('nobody', 10), []);
      await s.close();
    });

    it('drops the oldest entries beyond the limit and says how many', async () => {
      const s = await open(freshDir());
      assert.equal(await enqueue(s.sessions, 'q', [b('1'), b('2'), b('3')], 3), 0);
      assert.equal(await enqueue(s.sessions, 'q', [b('4'), b('5')], 3), 2);
      assert.deepEqual(
        (await s.sessions.readQueue('q', 10)).map((e) => e.data.toString()),
        ['3', '4', '5'],
      );
      await assert.rejects(enqueue(s.sessions, 'q', [b('6')], 0), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
      await s.close();
    });

    it('updateQueue rewrites, removes and appends by seq in one batch, and bounds the queue', async () => {
      const s = await open(freshDir());
      const first = await s.sessions.updateQueue('u', { append: [b('a'), b('b'), b('c')] }, 10);
      assert.equal(first.dropped, 0);
      assert.equal(first.seqs.length, 3);
      // Seqs increase in append order and are what readQueue reports.
      assert.ok(first.seqs[0] < first.seqs[1] && first.seqs[1] < first.seqs[2]);
      assert.deepEqual(
        (await s.sessions.readQueue('u', 10)).map((e) => e.seq),
        first.seqs,
      );
      const [sa, sb, sc] = first.seqs;
      // Rewrite b, remove a (and a seq that does not exist), append d: all in one call.
      const second = await s.sessions.updateQueue('u', { replace: [{ seq: sb, data: b('B') }], remove: [sa, 999_999], append: [b('d')] }, 10);
      assert.equal(second.seqs.length, 1);
      assert.ok(second.seqs[0] > sc, 'a new entry is ordered after the existing ones');
      const q = await s.sessions.readQueue('u', 10);
      assert.deepEqual(
        q.map((e) => e.data.toString()),
        ['B', 'c', 'd'],
      );
      assert.deepEqual(
        q.map((e) => e.seq),
        [sb, sc, second.seqs[0]],
      );
      // The drop-oldest bound applies after the batch.
      const third = await s.sessions.updateQueue('u', { append: [b('e'), b('f')] }, 3);
      assert.equal(third.dropped, 2);
      assert.deepEqual(
        (await s.sessions.readQueue('u', 10)).map((e) => e.data.toString()),
        ['d', 'e', 'f'],
      );
      // An empty batch changes nothing; other sessions are untouched.
      assert.deepEqual(await s.sessions.updateQueue('u', {}, 10), { seqs: [], dropped: 0 });
      assert.equal(await queueLength(s.sessions, 'u'), 3);
      assert.equal(await queueLength(s.sessions, 'other'), 0);
      await assert.rejects(s.sessions.updateQueue('u', { append: [b('g')] }, 0), (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT'));
      await s.close();
    });

    it('deleting a session removes its queue', async () => {
      const s = await open(freshDir());
      await s.sessions.putSession(rec('d'));
      await enqueue(s.sessions, 'd', [b('1')], 10);
      await s.sessions.deleteSession('d');
      assert.equal(await queueLength(s.sessions, 'd'), 0);
      await s.close();
    });

    it('sets, replaces, lists and deletes retained messages', async () => {
      const s = await open(freshDir());
      await s.retained.putRetained('a/b', b('1'));
      await s.retained.putRetained('a/c', b('2'));
      await s.retained.putRetained('a/b', b('3'));
      const all = (await s.retained.listRetained()).map((r) => [r.topic, r.data.toString()]).sort();
      assert.deepEqual(all, [
        ['a/b', '3'],
        ['a/c', '2'],
      ]);
      await s.retained.deleteRetained('a/b');
      await s.retained.deleteRetained('not/there');
      assert.deepEqual(
        (await s.retained.listRetained()).map((r) => r.topic),
        ['a/c'],
      );
      await s.close();
    });

    it('hands out seqs that only increase, also once the queue was empty, and many appends issued together get distinct ones', async () => {
      const s = await open(freshDir());
      const first = await s.sessions.updateQueue('n', { append: [b('a'), b('b')] }, 10);
      await s.sessions.ackQueue('n', first.seqs[1]);
      assert.deepEqual(await s.sessions.readQueue('n', 10), []);
      // A counter, not MAX(seq)+1: an emptied queue does not give the same seqs out again.
      const again = await s.sessions.updateQueue('n', { append: [b('c')] }, 10);
      assert.ok(again.seqs[0] > first.seqs[1], `${again.seqs[0]} after ${first.seqs[1]}`);
      const many = await Promise.all(Array.from({ length: 20 }, (_, i) => s.sessions.updateQueue('n', { append: [b(`x${i}`)] }, 100)));
      const seqs = many.map((r) => r.seqs[0]);
      for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i] > seqs[i - 1], 'in the order issued');
      assert.deepEqual(
        (await s.sessions.readQueue('n', 100)).map((e) => e.seq),
        [again.seqs[0], ...seqs],
      );
      await s.close();
    });

    it('bounds the queue by its length after removes and acks (drop-oldest counts what is really there)', async () => {
      const s = await open(freshDir());
      const { seqs } = await s.sessions.updateQueue('l', { append: [b('1'), b('2'), b('3')] }, 3);
      assert.equal((await s.sessions.updateQueue('l', { remove: [seqs[0], 424242] }, 3)).dropped, 0);
      assert.equal((await s.sessions.updateQueue('l', { append: [b('4')] }, 3)).dropped, 0, 'room for one after a remove');
      await s.sessions.ackQueue('l', seqs[2]);
      assert.deepEqual(
        (await s.sessions.readQueue('l', 10)).map((e) => e.data.toString()),
        ['4'],
      );
      assert.equal((await s.sessions.updateQueue('l', { append: [b('5'), b('6')] }, 3)).dropped, 0, 'room for two after an ack');
      assert.equal((await s.sessions.updateQueue('l', { append: [b('7')] }, 3)).dropped, 1);
      assert.deepEqual(
        (await s.sessions.readQueue('l', 10)).map((e) => e.data.toString()),
        ['5', '6', '7'],
      );
      await s.sessions.ackQueue('l', 0); // acks nothing
      await s.sessions.deleteSession('l');
      assert.equal((await s.sessions.updateQueue('l', { append: [b('8'), b('9')] }, 2)).dropped, 0, 'a deleted queue is empty');
      await s.close();
    });

    describe('per-key order: operations issued without awaiting take effect in the order issued', () => {
      it('deleteSession then putSession: the new record stays, the old queue is gone', async () => {
        const s = await open(freshDir());
        await s.sessions.putSession(rec('dp', { state: '"old"' }));
        await s.sessions.updateQueue('dp', { append: [b('old')] }, 10);
        const ops = [s.sessions.deleteSession('dp'), s.sessions.putSession(rec('dp', { state: '"new"' }))];
        const read = s.sessions.getSession('dp');
        await Promise.all(ops);
        assert.equal((await read)?.state, '"new"', 'a read sees the writes issued before it');
        assert.equal((await s.sessions.getSession('dp'))?.state, '"new"');
        assert.deepEqual(await s.sessions.readQueue('dp', 10), []);
        await s.close();
      });

      it('putSession then deleteSession: nothing stays', async () => {
        const s = await open(freshDir());
        const ops = [s.sessions.putSession(rec('pd')), s.sessions.updateQueue('pd', { append: [b('q')] }, 10), s.sessions.deleteSession('pd')];
        await Promise.all(ops);
        assert.equal(await s.sessions.getSession('pd'), null);
        assert.deepEqual(await s.sessions.readQueue('pd', 10), []);
        assert.deepEqual(
          (await s.sessions.listSessions('mqtt')).map((r) => r.clientId),
          [],
        );
        await s.close();
      });

      it('updateQueue (append), then readQueue, then ackQueue, then another append', async () => {
        const s = await open(freshDir());
        const appended = s.sessions.updateQueue('ra', { append: [b('1'), b('2')] }, 10);
        const read = s.sessions.readQueue('ra', 10);
        const acked = s.sessions.ackQueue('ra', Number.MAX_SAFE_INTEGER);
        const later = s.sessions.updateQueue('ra', { append: [b('3')] }, 10);
        const [a, r, , l] = await Promise.all([appended, read, acked, later]);
        assert.deepEqual(
          r.map((e) => e.data.toString()),
          ['1', '2'],
          'the read saw the append issued before it',
        );
        assert.deepEqual(
          r.map((e) => e.seq),
          a.seqs,
        );
        assert.deepEqual(
          (await s.sessions.readQueue('ra', 10)).map((e) => [e.seq, e.data.toString()]),
          [[l.seqs[0], '3']],
        );
        await s.close();
      });

      it('several updateQueues in a row, removing and rewriting entries of earlier ones', async () => {
        const s = await open(freshDir());
        const {
          seqs: [s1, s2, s3],
        } = await s.sessions.updateQueue('uq', { append: [b('a'), b('b'), b('c')] }, 10);
        const u1 = s.sessions.updateQueue('uq', { remove: [s1], append: [b('d')] }, 10);
        const u2 = s.sessions.updateQueue('uq', { remove: [s2], replace: [{ seq: s3, data: b('C') }], append: [b('e')] }, 10);
        const u3 = s.sessions.updateQueue('uq', { append: [b('f')] }, 10);
        const read = s.sessions.readQueue('uq', 10);
        const [r1, r2, r3] = await Promise.all([u1, u2, u3]);
        assert.ok(s3 < r1.seqs[0] && r1.seqs[0] < r2.seqs[0] && r2.seqs[0] < r3.seqs[0], 'seqs in the order issued');
        const q = await read;
        assert.deepEqual(
          q.map((e) => e.data.toString()),
          ['C', 'd', 'e', 'f'],
        );
        assert.deepEqual(
          q.map((e) => e.seq),
          [s3, r1.seqs[0], r2.seqs[0], r3.seqs[0]],
        );
        // Removes of seqs appended by calls issued just before (their seqs known from the earlier results).
        const u4 = s.sessions.updateQueue('uq', { remove: [r1.seqs[0], r2.seqs[0]] }, 10);
        const u5 = s.sessions.updateQueue('uq', { remove: [r3.seqs[0]], append: [b('g')] }, 10);
        await Promise.all([u4, u5]);
        assert.deepEqual(
          (await s.sessions.readQueue('uq', 10)).map((e) => e.data.toString()),
          ['C', 'g'],
        );
        await s.close();
      });

      it('putRetained, deleteRetained, putRetained on one topic', async () => {
        const s = await open(freshDir());
        await Promise.all([s.retained.putRetained('r/1', b('first')), s.retained.deleteRetained('r/1'), s.retained.putRetained('r/1', b('last'))]);
        await Promise.all([s.retained.putRetained('r/2', b('gone')), s.retained.deleteRetained('r/2')]);
        await Promise.all([s.retained.putRetained('r/3', b('x')), s.retained.putRetained('r/3', b('y'))]);
        assert.deepEqual((await s.retained.listRetained()).map((r) => [r.topic, r.data.toString()]).sort(), [
          ['r/1', 'last'],
          ['r/3', 'y'],
        ]);
        await s.close();
      });
    });

    if (durable) {
      it('keeps sessions, queues and retained messages across a reopen', async () => {
        const dir = freshDir();
        const s = await open(dir);
        await s.sessions.putSession(rec('p'));
        await enqueue(s.sessions, 'p', [b('m1'), b('m2')], 10);
        const msg = makeMessage('r/t', b('kept'), { qos: 1, retain: true, contentType: 'text/plain', expiresAt: 1e13 });
        await s.retained.putRetained('r/t', encodeStoredMessage(msg));
        await s.close();
        const again = await open(dir);
        assert.deepEqual(await again.sessions.getSession('p'), rec('p'));
        assert.deepEqual(
          (await again.sessions.readQueue('p', 10)).map((e) => e.data.toString()),
          ['m1', 'm2'],
        );
        const r = await again.retained.listRetained();
        assert.equal(r.length, 1);
        assert.deepEqual(decodeStoredMessage(r[0].data), msg);
        // New entries go after the reopened ones.
        await enqueue(again.sessions, 'p', [b('m3')], 10);
        assert.deepEqual(
          (await again.sessions.readQueue('p', 10)).map((e) => e.data.toString()),
          ['m1', 'm2', 'm3'],
        );
        await again.close();
      });
    }
  });
}
