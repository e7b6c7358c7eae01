/**
 * What every ConsumerStateStore backend (JetStream consumer state, src/core/consumers.ts) must do. `open(dir)`
 * opens (or reopens) the store kept in `dir`; `durable` says whether a reopened store must still hold what was
 * written (false for the in-memory one).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isFlowError, type ConsumerRecord, type ConsumerStateStore } from '../../src/core/index.js';

export interface ConsumerBackend {
  store: ConsumerStateStore;
  close(): Promise<void>;
}

const config = (over: Record<string, unknown> = {}): string =>
  JSON.stringify({ durable_name: 'd', ack_policy: 'explicit', ack_wait: 30_000_000_000, deliver_policy: 'all', filter_subject: 'a.>', ...over });

const rec = (stream: string, name: string, over: Partial<ConsumerRecord> = {}): ConsumerRecord => ({
  stream,
  name,
  config: config({ durable_name: name }),
  createdAt: 1_700_000_000_000,
  deliveredSeq: 0,
  deliveredConsumerSeq: 0,
  ackFloor: 0,
  acked: [],
  ...over,
});

const names = (recs: ConsumerRecord[]): string[] => recs.map((r) => `${r.stream}/${r.name}`);
const invalid = (e: unknown): boolean => isFlowError(e, 'INVALID_ARGUMENT');

export function consumerStoreConformance(name: string, durable: boolean, open: (dir: string) => Promise<ConsumerBackend>): void {
  describe(`ConsumerStateStore conformance: ${name}`, () => {
    let root = '';
    let n = 0;
    const freshDir = (): string => join(root, `case-${n++}`);
    before(async () => {
      root = await mkdtemp(join(tmpdir(), 'flowmq-consumers-conformance-'));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('puts, gets, replaces and deletes a consumer record, every field intact', async () => {
      const { store, close } = await open(freshDir());
      assert.equal(await store.getConsumer('orders', 'c1'), null);
      const first = rec('orders', 'c1');
      await store.putConsumer(first);
      assert.deepEqual(await store.getConsumer('orders', 'c1'), first);
      // A position as the service writes it: delivered ahead of the floor, acks out of order above it, sequences
      // up to the largest safe integer, a config with non-ASCII text.
      const moved = rec('orders', 'c1', {
        config: config({ description: 'größe ✓ "quoted" \\ back' }),
        createdAt: 1_700_000_000_001,
        deliveredSeq: Number.MAX_SAFE_INTEGER,
        deliveredConsumerSeq: 2 ** 40,
        ackFloor: 2 ** 40 - 10,
        acked: [2 ** 40 - 8, 2 ** 40 - 3, Number.MAX_SAFE_INTEGER],
      });
      await store.putConsumer(moved);
      assert.deepEqual(await store.getConsumer('orders', 'c1'), moved, 'the whole record replaced');
      assert.equal(await store.getConsumer('orders', 'c2'), null, 'another name of the stream');
      assert.equal(await store.getConsumer('other', 'c1'), null, 'the same name in another stream');
      await store.deleteConsumer('orders', 'c1');
      assert.equal(await store.getConsumer('orders', 'c1'), null);
      await store.deleteConsumer('orders', 'c1');
      await store.deleteConsumer('never', 'existed');
      await close();
    });

    it('keeps a long list of out-of-order acks', async () => {
      const { store, close } = await open(freshDir());
      const acked = Array.from({ length: 5000 }, (_, i) => 1_000_000 + 2 * i + 1);
      const r = rec('s', 'many', { ackFloor: 1_000_000, deliveredSeq: 1_010_000, deliveredConsumerSeq: 1_010_500, acked });
      await store.putConsumer(r);
      assert.deepEqual(await store.getConsumer('s', 'many'), r);
      await close();
    });

    it('lists the consumers of one stream by name, and of every stream by stream then name', async () => {
      const { store, close } = await open(freshDir());
      assert.deepEqual(await store.listConsumers(), []);
      assert.deepEqual(await store.listConsumers('s1'), []);
      // Names that a LIKE or a prefix match would confuse.
      for (const [s, c] of [
        ['s1', 'b'],
        ['s1', 'a'],
        ['s10', 'a'],
        ['s', 'z'],
        ['s_1', 'x'],
        ['s%1', 'y'],
        ['s1', 'c'],
      ]) {
        await store.putConsumer(rec(s, c));
      }
      assert.deepEqual(names(await store.listConsumers('s1')), ['s1/a', 's1/b', 's1/c']);
      assert.deepEqual(names(await store.listConsumers('s_1')), ['s_1/x']);
      assert.deepEqual(names(await store.listConsumers('s%1')), ['s%1/y']);
      assert.deepEqual(names(await store.listConsumers('nope')), []);
      assert.deepEqual(names(await store.listConsumers()), ['s/z', 's%1/y', 's1/a', 's1/b', 's1/c', 's10/a', 's_1/x']);
      assert.deepEqual((await store.listConsumers('s1'))[1], rec('s1', 'b'), 'listed records are whole');
      await close();
    });

    it('deleteConsumers removes every consumer of one stream and nothing else', async () => {
      const { store, close } = await open(freshDir());
      for (const [s, c] of [
        ['gone', 'a'],
        ['gone', 'b'],
        ['gone2', 'a'],
        ['gon', 'a'],
        ['go_e', 'a'],
        ['stays', 'a'],
      ]) {
        await store.putConsumer(rec(s, c));
      }
      await store.deleteConsumers('gone');
      assert.deepEqual(names(await store.listConsumers()), ['go_e/a', 'gon/a', 'gone2/a', 'stays/a']);
      assert.equal(await store.getConsumer('gone', 'a'), null);
      await store.deleteConsumers('gone');
      await store.deleteConsumers('never-had-any');
      // A stream of the same name again starts without consumers; new ones are kept as usual.
      await store.putConsumer(rec('gone', 'new'));
      assert.deepEqual(names(await store.listConsumers('gone')), ['gone/new']);
      await close();
    });

    it('gives out copies: changing a record after put or after get changes nothing stored', async () => {
      const { store, close } = await open(freshDir());
      const r = rec('s', 'c', { ackFloor: 3, acked: [5, 7] });
      await store.putConsumer(r);
      r.acked.push(9);
      r.deliveredSeq = 99;
      const got = (await store.getConsumer('s', 'c'))!;
      assert.deepEqual(got.acked, [5, 7]);
      assert.equal(got.deliveredSeq, 0);
      got.acked.push(11);
      (await store.listConsumers('s'))[0].acked.push(13);
      assert.deepEqual((await store.getConsumer('s', 'c'))!.acked, [5, 7]);
      await close();
    });

    it('refuses a record it could not give back as written with INVALID_ARGUMENT, writing nothing', async () => {
      const { store, close } = await open(freshDir());
      const good = rec('s', 'c', { ackFloor: 10, acked: [12] });
      await store.putConsumer(good);
      const bad: Array<Partial<ConsumerRecord> | Record<string, unknown>> = [
        { stream: '' },
        { name: '' },
        { name: 7 },
        { name: 'a\u0000b' },
        { stream: 's\u0000' },
        { config: '{"x":"\u0000"}' },
        { config: { durable_name: 'c' } },
        { deliveredSeq: -1 },
        { deliveredConsumerSeq: 1.5 },
        { ackFloor: Number.MAX_SAFE_INTEGER + 1 },
        { createdAt: Number.NaN },
        { acked: [13, 12] },
        { acked: [12, 12] },
        { acked: [10] },
        { acked: [5] },
        { acked: ['12'] },
        { acked: null },
      ];
      for (const over of bad) {
        await assert.rejects(store.putConsumer({ ...good, ...over } as ConsumerRecord), invalid, JSON.stringify(over));
      }
      assert.deepEqual(await store.getConsumer('s', 'c'), good);
      assert.deepEqual(names(await store.listConsumers()), ['s/c']);
      await close();
    });

    describe('per-key order: operations issued without awaiting take effect in the order issued', () => {
      it('puts of one consumer: the last one issued stays, and a read sees the writes issued before it', async () => {
        const { store, close } = await open(freshDir());
        const ops: Array<Promise<unknown>> = [];
        for (let i = 1; i <= 50; i++) ops.push(store.putConsumer(rec('s', 'c', { deliveredSeq: i, deliveredConsumerSeq: i, ackFloor: i - 1 })));
        const read = store.getConsumer('s', 'c');
        for (let i = 51; i <= 60; i++) ops.push(store.putConsumer(rec('s', 'c', { deliveredSeq: i, deliveredConsumerSeq: i, ackFloor: i - 1 })));
        const list = store.listConsumers('s');
        await Promise.all(ops);
        assert.equal((await read)?.deliveredSeq, 50, 'the read saw the 50 puts issued before it, not the later ones');
        assert.equal((await list)[0].deliveredSeq, 60);
        assert.equal((await store.getConsumer('s', 'c'))?.deliveredSeq, 60);
        await close();
      });

      it('put, delete, put of one consumer; put then delete of another', async () => {
        const { store, close } = await open(freshDir());
        await Promise.all([
          store.putConsumer(rec('s', 'a', { deliveredSeq: 1 })),
          store.deleteConsumer('s', 'a'),
          store.putConsumer(rec('s', 'a', { deliveredSeq: 3 })),
          store.putConsumer(rec('s', 'b', { deliveredSeq: 1 })),
          store.putConsumer(rec('s', 'b', { deliveredSeq: 2 })),
          store.deleteConsumer('s', 'b'),
        ]);
        assert.deepEqual(await store.listConsumers('s'), [rec('s', 'a', { deliveredSeq: 3 })]);
        await close();
      });

      it('deleteConsumers comes after the puts issued before it and before those issued after it', async () => {
        const { store, close } = await open(freshDir());
        const ops: Array<Promise<unknown>> = [];
        for (let i = 0; i < 20; i++) ops.push(store.putConsumer(rec('s', `c${i % 4}`, { deliveredSeq: i })));
        ops.push(store.putConsumer(rec('t', 'kept')));
        ops.push(store.deleteConsumers('s'));
        const between = store.listConsumers('s');
        ops.push(store.putConsumer(rec('s', 'c1', { deliveredSeq: 100 })));
        ops.push(store.putConsumer(rec('s', 'late', { deliveredSeq: 101 })));
        await Promise.all(ops);
        assert.deepEqual(await between, []);
        assert.deepEqual(names(await store.listConsumers()), ['s/c1', 's/late', 't/kept']);
        assert.equal((await store.getConsumer('s', 'c1'))?.deliveredSeq, 100);
        await close();
      });

      it('many consumers of several streams written together: each keeps its own last write', async () => {
        const { store, close } = await open(freshDir());
        const ops: Array<Promise<unknown>> = [];
        for (let round = 1; round <= 10; round++) {
          for (const s of ['x', 'y']) {
            for (let c = 0; c < 5; c++) ops.push(store.putConsumer(rec(s, `c${c}`, { deliveredSeq: round * 10 + c, ackFloor: round })));
          }
        }
        const all = store.listConsumers();
        await Promise.all(ops);
        const expect = ['x', 'y'].flatMap((s) => Array.from({ length: 5 }, (_, c) => rec(s, `c${c}`, { deliveredSeq: 100 + c, ackFloor: 10 })));
        assert.deepEqual(await all, expect, 'a listing of every stream sees every write issued before it');
        await close();
      });
    });

    if (durable) {
      it('keeps consumer records across a reopen', async () => {
        const dir = freshDir();
        const a = rec('s', 'a', { deliveredSeq: 7, deliveredConsumerSeq: 9, ackFloor: 4, acked: [6] });
        const b = rec('s', 'b');
        const c = rec('t', 'c', { config: '{}' });
        {
          const { store, close } = await open(dir);
          for (const r of [a, b, c]) await store.putConsumer(r);
          await store.deleteConsumer('s', 'b');
          // Writes not awaited before close: close finishes them.
          void store.putConsumer({ ...c, deliveredSeq: 1 });
          await close();
        }
        const { store, close } = await open(dir);
        assert.deepEqual(await store.listConsumers(), [a, { ...c, deliveredSeq: 1 }]);
        await close();
      });
    }
  });
}
