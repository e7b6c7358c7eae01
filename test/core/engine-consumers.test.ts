/**
 * Engine.deleteStream and JetStream consumer state (src/core/engine.ts, src/core/consumers.ts): deleting a stream
 * deletes its consumers from the store, in memory and in the SQLite metastore, and leaves other streams' alone.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Engine, type ConsumerRecord, type CoreStore } from '../../src/core/index.js';
import { SqliteMetastore } from '../../src/storage/metastore/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

const rec = (stream: string, name: string): ConsumerRecord => ({
  stream,
  name,
  config: '{}',
  createdAt: 1,
  deliveredSeq: 5,
  deliveredConsumerSeq: 6,
  ackFloor: 2,
  acked: [4],
});

const stores: Array<[string, () => { store: CoreStore; close(): Promise<void> }]> = [
  ['MemoryStore', () => ({ store: new MemoryStreams(), close: async () => undefined })],
  [
    'SqliteMetastore',
    () => {
      const m = SqliteMetastore.open(':memory:');
      return { store: m, close: () => m.close() };
    },
  ],
];

describe('Engine.deleteStream and JetStream consumers', () => {
  for (const [kind, make] of stores) {
    it(`deletes the stream's consumers and no others (${kind})`, async () => {
      const { store, close } = make();
      const engine = new Engine(new MemoryStreams(), store);
      await engine.createStream({ name: 'orders', partitions: 1 });
      await engine.createStream({ name: 'orders2', partitions: 1 });
      for (const r of [rec('orders', 'a'), rec('orders', 'b'), rec('orders2', 'a')]) await store.putConsumer(r);
      await engine.deleteStream('orders');
      assert.deepEqual(await store.listConsumers('orders'), []);
      assert.deepEqual(await store.listConsumers(), [rec('orders2', 'a')]);
      // The same name again starts without consumers.
      await engine.createStream({ name: 'orders', partitions: 1 });
      assert.equal(await store.getConsumer('orders', 'a'), null);
      engine.close();
      await close();
    });
  }
});
