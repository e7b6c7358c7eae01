/**
 * What every ControlStore backend (src/control/store.ts: the control plane's users, groups, tokens, policies,
 * namespaces and login sessions) must do. `open(dir)` opens (or reopens) the store kept in `dir`; `durable` says
 * whether a reopened store still holds what was written, and whether a second handle opened on the same `dir` (as
 * another broker sharing the metastore) sees the first one's changes (false for the in-memory one).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError } from '../../src/core/index.js';
import type { ControlKind, ControlStore } from '../../src/storage/metastore/control-store.js';

export interface ControlBackend {
  store: ControlStore;
  close(): Promise<void>;
}

const invalid = (e: unknown): boolean => isFlowError(e, 'INVALID_ARGUMENT');

export function controlStoreConformance(name: string, durable: boolean, open: (dir: string) => Promise<ControlBackend>): void {
  describe(`ControlStore conformance: ${name}`, () => {
    let root = '';
    let n = 0;
    const freshDir = (): string => join(root, `case-${n++}`);
    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'flowmq-control-conformance-'));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('puts, gets, replaces and deletes a document, JSON intact', async () => {
      const { store, close } = await open(freshDir());
      assert.equal(await store.getControl('user', 'alice'), null);
      const doc = {
        groups: ['ops', 'admins'],
        namespace: 'default',
        scram: { 'SCRAM-SHA-256': { salt: 'c2FsdA==', iterations: 4096 } },
        text: 'größe ✓ "quoted" \\ back \u0000 nul',
        big: Number.MAX_SAFE_INTEGER,
        negative: -1.5,
        none: null,
        empty: {},
      };
      const before = Date.now();
      await store.putControl('user', 'alice', doc);
      const got = await store.getControl('user', 'alice');
      assert.ok(got);
      assert.equal(got.kind, 'user');
      assert.equal(got.name, 'alice');
      assert.deepEqual(got.data, doc);
      assert.ok(got.updatedAt >= before - 1000 && got.updatedAt <= Date.now() + 1000, `updatedAt ${got.updatedAt} is a time in ms`);
      await store.putControl('user', 'alice', { groups: [] });
      assert.deepEqual((await store.getControl('user', 'alice'))?.data, { groups: [] }, 'the whole document replaced');
      assert.equal(await store.getControl('group', 'alice'), null, 'the same name of another kind');
      assert.equal(await store.deleteControl('user', 'alice'), true);
      assert.equal(await store.getControl('user', 'alice'), null);
      assert.equal(await store.deleteControl('user', 'alice'), false, 'a second delete finds nothing');
      await close();
    });

    it('drops undefined fields as JSON does, and hands out copies', async () => {
      const { store, close } = await open(freshDir());
      const input: Record<string, unknown> = { a: 1, gone: undefined, list: [1, 2] };
      await store.putControl('group', 'g', input);
      (input.list as number[]).push(3);
      input.a = 2;
      const first = await store.getControl('group', 'g');
      assert.deepEqual(first?.data, { a: 1, list: [1, 2] }, "a change to the caller's object after the put is not stored");
      (first!.data as { list: number[] }).list.push(9);
      assert.deepEqual((await store.getControl('group', 'g'))?.data, { a: 1, list: [1, 2] }, 'a change to a read copy is not stored');
      assert.deepEqual((await store.listControl('group'))[0].data, { a: 1, list: [1, 2] });
      await close();
    });

    it('lists one kind, ordered by name', async () => {
      const { store, close } = await open(freshDir());
      const names = ['zeta', 'alpha', 'Beta', 'user@example.com', 'a.b-c_d', 'ünïcode'];
      for (const x of names) await store.putControl('policy', x, { name: x });
      await store.putControl('group', 'alpha', { other: true });
      await store.putControl('token', 't1', { user: 'alpha' });
      const list = await store.listControl('policy');
      assert.deepEqual(
        list.map((r) => r.name),
        [...names].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
        'by name, in code unit order',
      );
      assert.ok(list.every((r) => r.kind === 'policy' && (r.data as { name: string }).name === r.name));
      assert.deepEqual(
        (await store.listControl('group')).map((r) => r.name),
        ['alpha'],
      );
      assert.deepEqual(await store.listControl('namespace'), []);
      await close();
    });

    it('putControlIfAbsent creates only when absent', async () => {
      const { store, close } = await open(freshDir());
      assert.equal(await store.putControlIfAbsent('user', 'first', { v: 1 }), true);
      assert.equal(await store.putControlIfAbsent('user', 'first', { v: 2 }), false);
      assert.deepEqual((await store.getControl('user', 'first'))?.data, { v: 1 }, 'the existing document is left alone');
      assert.equal(await store.putControlIfAbsent('group', 'first', { v: 3 }), true, 'another kind is another key');
      await store.deleteControl('user', 'first');
      assert.equal(await store.putControlIfAbsent('user', 'first', { v: 4 }), true, 'absent again after a delete');
      assert.deepEqual((await store.getControl('user', 'first'))?.data, { v: 4 });
      await close();
    });

    it('bumps the version on every change, not on a change that did nothing, not for login sessions', async () => {
      const { store, close } = await open(freshDir());
      let v = await store.controlVersion();
      const grew = async (what: string): Promise<void> => {
        const next = await store.controlVersion();
        assert.ok(next > v, `${what}: version ${next} after ${v}`);
        v = next;
      };
      const same = async (what: string): Promise<void> => assert.equal(await store.controlVersion(), v, what);
      await store.putControl('user', 'u', { a: 1 });
      await grew('a put');
      await store.putControl('user', 'u', { a: 1 });
      await grew('the same put again (a write is a change)');
      assert.equal(await store.putControlIfAbsent('policy', 'p', { a: 1 }), true);
      await grew('a putControlIfAbsent that created');
      assert.equal(await store.putControlIfAbsent('policy', 'p', { a: 2 }), false);
      await same('a putControlIfAbsent that found the document');
      assert.equal(await store.deleteControl('policy', 'p'), true);
      await grew('a delete');
      assert.equal(await store.deleteControl('policy', 'p'), false);
      await same('a delete of nothing');
      for (const kind of ['group', 'token', 'namespace'] as ControlKind[]) {
        await store.putControl(kind, 'x', {});
        await grew(`a put of a ${kind}`);
      }
      await store.putControl('session', 's1', { user: 'u', expiresAt: 1 });
      assert.equal(await store.putControlIfAbsent('session', 's2', {}), true);
      assert.equal(await store.deleteControl('session', 's1'), true);
      await same('login sessions do not bump the version');
      assert.deepEqual(
        (await store.listControl('session')).map((r) => r.name),
        ['s2'],
        'but they are stored',
      );
      await close();
    });

    it("keeps the Kafka transaction coordinator's documents (txn, txn-aborted) without bumping the version", async () => {
      const { store, close } = await open(freshDir());
      const v = await store.controlVersion();
      const txn = {
        transactionalId: 'tx-1',
        producerId: 2 ** 40,
        producerEpoch: 3,
        timeoutMs: 60000,
        state: 'PrepareCommit',
        partitions: [{ stream: 'a.b', partition: 2, startOffset: 17 }],
        groups: ['g'],
        offsets: [{ group: 'g', stream: 'in', partition: 0, offset: 5, metadata: null }],
        startTimeMs: 1700000000000,
        updatedAt: 1,
      };
      await store.putControl('txn', 'tx-1', txn);
      await store.putControl('txn-aborted', '2:a.b', { stream: 'a.b', partition: 2, aborted: [{ producerId: 2 ** 40, firstOffset: 17, lastOffset: 20 }] });
      assert.deepEqual((await store.getControl('txn', 'tx-1'))?.data, txn);
      await store.putControl('txn', 'tx-1', { ...txn, state: 'CompleteCommit', partitions: [] });
      assert.deepEqual(
        (await store.listControl('txn')).map((r) => [r.name, r.data.state]),
        [['tx-1', 'CompleteCommit']],
      );
      assert.deepEqual(
        (await store.listControl('txn-aborted')).map((r) => r.name),
        ['2:a.b'],
      );
      assert.equal(await store.controlVersion(), v, 'transaction state is data-path state, not the directory: no reload of every broker');
      await close();
    });

    it('refuses an unknown kind, an empty name or a document that is not an object', async () => {
      const { store, close } = await open(freshDir());
      await assert.rejects(store.putControl('nope' as ControlKind, 'x', {}), invalid);
      await assert.rejects(store.listControl('nope' as ControlKind), invalid);
      await assert.rejects(store.getControl('nope' as ControlKind, 'x'), invalid);
      await assert.rejects(store.putControl('user', '', {}), invalid);
      await assert.rejects(store.putControl('user', 'a\u0000b', {}), invalid);
      await assert.rejects(store.putControl('user', 'x', [] as unknown as Record<string, unknown>), invalid);
      await assert.rejects(store.putControl('user', 'x', null as unknown as Record<string, unknown>), invalid);
      await assert.rejects(store.putControlIfAbsent('user', 'x', 'text' as unknown as Record<string, unknown>), invalid);
      await assert.rejects(store.deleteControl('user', ''), invalid);
      assert.equal(await store.getControl('user', 'x'), null, 'nothing was stored');
      await close();
    });

    it('keeps the order of calls on one key issued without waiting, and a list sees every write issued before it', async () => {
      const { store, close } = await open(freshDir());
      const calls: Array<Promise<unknown>> = [];
      for (let i = 0; i < 20; i++) {
        calls.push(store.putControl('user', 'k', { i }));
        if (i % 5 === 4) calls.push(store.deleteControl('user', 'k'));
      }
      calls.push(store.putControl('user', 'k', { i: 'last' }));
      for (let i = 0; i < 30; i++) calls.push(store.putControl('group', `g${String(i).padStart(2, '0')}`, { i }));
      const listed = store.listControl('group');
      const version = store.controlVersion();
      const got = store.getControl('user', 'k');
      await Promise.all(calls);
      assert.deepEqual((await got)?.data, { i: 'last' });
      assert.equal((await listed).length, 30, 'the list came after the 30 puts');
      assert.ok((await version) >= 30 + 20 + 4 + 1, 'the version read came after every change issued before it');
      await close();
    });

    if (durable) {
      it('keeps documents and the version across a reopen', async () => {
        const dir = freshDir();
        const a = await open(dir);
        await a.store.putControl('namespace', 'team-a', { quotas: { maxConnections: 10 } });
        await a.store.putControl('session', 'abc', { user: 'u' });
        await a.store.putControl('txn', 'tx', { state: 'Ongoing' });
        const v = await a.store.controlVersion();
        await a.close();
        const b = await open(dir);
        assert.deepEqual((await b.store.getControl('namespace', 'team-a'))?.data, { quotas: { maxConnections: 10 } });
        assert.deepEqual((await b.store.getControl('session', 'abc'))?.data, { user: 'u' });
        assert.deepEqual((await b.store.getControl('txn', 'tx'))?.data, { state: 'Ongoing' }, 'transaction state survives a restart');
        assert.equal(await b.store.controlVersion(), v, 'the version does not go back (a poller would miss changes)');
        await b.close();
      });

      it('a change through one handle moves the version another handle reads (two brokers on one metastore)', async () => {
        const dir = freshDir();
        const a = await open(dir);
        const b = await open(dir);
        const v0 = await b.store.controlVersion();
        await a.store.putControl('policy', 'p1', { effect: 'deny' });
        const v1 = await b.store.controlVersion();
        assert.ok(v1 > v0, 'b sees the version move');
        assert.deepEqual(
          (await b.store.listControl('policy')).map((r) => r.name),
          ['p1'],
        );
        await b.store.deleteControl('policy', 'p1');
        assert.ok((await a.store.controlVersion()) > v1, 'and the other way round');
        assert.equal(await a.store.getControl('policy', 'p1'), null);
        // Both seed the same name at once: exactly one creates it.
        const results = await Promise.all([a.store.putControlIfAbsent('user', 'admin', { by: 'a' }), b.store.putControlIfAbsent('user', 'admin', { by: 'b' })]);
        assert.equal(results.filter(Boolean).length, 1, `one of ${JSON.stringify(results)}`);
        const winner = results[0] ? 'a' : 'b';
        assert.deepEqual((await a.store.getControl('user', 'admin'))?.data, { by: winner });
        // Changes through both at once each bump it: nothing is lost.
        const before = await a.store.controlVersion();
        await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).store.putControl('group', `g${i}`, {})));
        assert.ok((await b.store.controlVersion()) >= before + 10, 'ten changes, ten bumps');
        assert.equal((await a.store.listControl('group')).length, 10);
        await a.close();
        await b.close();
      });
    }
  });
}
