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
      assert.deepEqual(
        (await s.sessions.listSessions('mqtt')).map((r) => r.clientId).sort(),
        ['c1', 'c2'],
      );
      assert.equal((await s.sessions.getSession('c2'))?.expiresAt, null);
      await s.sessions.deleteSession('c1');
      await s.sessions.deleteSession('never-existed');
      assert.equal(await s.sessions.getSession('c1'), null);
      await s.close();
    });

    it('queues per session in order, reads in pages, acks a prefix', async () => {
      const s = await open(freshDir());
      assert.equal(await enqueue(s.sessions, 'q', [b('1'), b('2'), b('3')], 100), 0);
      await enqueue(s.sessions, 'other', [b('x')], 100);
      assert.equal(await enqueue(s.sessions, 'q', [b('4')], 100), 0);
      assert.equal(await queueLength(s.sessions, 'q'), 4);
      const first = await s.sessions.readQueue('q', 2);
      assert.deepEqual(first.map((e) => e.data.toString()), ['1', '2']);
      assert.ok(first[0].seq < first[1].seq);
      await s.sessions.ackQueue('q', first[1].seq);
      const rest = await s.sessions.readQueue('q', 10);
      assert.deepEqual(rest.map((e) => e.data.toString()), ['3', '4']);
      assert.ok(rest[0].seq > first[1].seq, 'sequence numbers keep increasing');
      assert.deepEqual((await s.sessions.readQueue('other', 10)).map((e) => e.data.toString()), ['x']);
      assert.deepEqual(await s.sessions.readQueue('nobody', 10), []);
      await s.close();
    });

    it('drops the oldest entries beyond the limit and says how many', async () => {
      const s = await open(freshDir());
      assert.equal(await enqueue(s.sessions, 'q', [b('1'), b('2'), b('3')], 3), 0);
      assert.equal(await enqueue(s.sessions, 'q', [b('4'), b('5')], 3), 2);
      assert.deepEqual((await s.sessions.readQueue('q', 10)).map((e) => e.data.toString()), ['3', '4', '5']);
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
      assert.deepEqual((await s.sessions.readQueue('u', 10)).map((e) => e.seq), first.seqs);
      const [sa, sb, sc] = first.seqs;
      // Rewrite b, remove a (and a seq that does not exist), append d: all in one call.
      const second = await s.sessions.updateQueue('u', { replace: [{ seq: sb, data: b('B') }], remove: [sa, 999_999], append: [b('d')] }, 10);
      assert.equal(second.seqs.length, 1);
      assert.ok(second.seqs[0] > sc, 'a new entry is ordered after the existing ones');
      const q = await s.sessions.readQueue('u', 10);
      assert.deepEqual(q.map((e) => e.data.toString()), ['B', 'c', 'd']);
      assert.deepEqual(q.map((e) => e.seq), [sb, sc, second.seqs[0]]);
      // The drop-oldest bound applies after the batch.
      const third = await s.sessions.updateQueue('u', { append: [b('e'), b('f')] }, 3);
      assert.equal(third.dropped, 2);
      assert.deepEqual((await s.sessions.readQueue('u', 10)).map((e) => e.data.toString()), ['d', 'e', 'f']);
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
      assert.deepEqual((await s.retained.listRetained()).map((r) => r.topic), ['a/c']);
      await s.close();
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
        assert.deepEqual((await again.sessions.readQueue('p', 10)).map((e) => e.data.toString()), ['m1', 'm2']);
        const r = await again.retained.listRetained();
        assert.equal(r.length, 1);
        assert.deepEqual(decodeStoredMessage(r[0].data), msg);
        // New entries go after the reopened ones.
        await enqueue(again.sessions, 'p', [b('m3')], 10);
        assert.deepEqual((await again.sessions.readQueue('p', 10)).map((e) => e.data.toString()), ['m1', 'm2', 'm3']);
        await again.close();
      });
    }
  });
}
