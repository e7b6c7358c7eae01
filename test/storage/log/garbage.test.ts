import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { streamOfObjectKey, streamOfWalKey } from '../../../src/storage/log/garbage.js';
import { partitionKey } from '../../../src/storage/log/partition.js';
import { compactedKey, segmentKey } from '../../../src/storage/log/segment.js';
import type { StreamDef } from '../../../src/core/index.js';

const def = (name: string, createdAt: number): StreamDef => ({ name, partitions: 3, bindings: [], retentionMs: null, createdAt }) as unknown as StreamDef;

describe('garbage collector: which stream a WAL key or object belongs to', () => {
  it('reads the stream and its creation time back from the keys the log writes, names with / and @ included', () => {
    for (const name of ['orders', 'a/b/c', '$ns/team-a/orders', 'x@y', 'n@1']) {
      const d = def(name, 1733550000123);
      const id = `${name}@1733550000123`;
      assert.equal(streamOfWalKey(partitionKey(d, 2)), id, `WAL key of ${name}`);
      const prefix = `streams/${name}/1733550000123/2`;
      assert.equal(streamOfObjectKey(segmentKey(prefix, 4096, 7)), id, `segment of ${name}`);
      assert.equal(streamOfObjectKey(compactedKey(prefix, 0, 7, 3)), id, `compacted segment of ${name}`);
    }
  });

  it('leaves keys of any other shape alone', () => {
    for (const k of ['orders', 'orders/1', 'orders@x/1', 'orders@1/x', '@1/0', 'queue:orders']) assert.equal(streamOfWalKey(k), null, k);
    for (const k of ['streams/orders/0001.seg', 'other/orders/1/0/a.seg', 'streams/orders/x/0/a.seg', 'streams/orders/1/y/a.seg'])
      assert.equal(streamOfObjectKey(k), null, k);
  });
});
