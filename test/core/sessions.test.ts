import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Engine, MemoryRetainedStore, RetainedIndex, decodeStoredMessage, encodeStoredMessage, isFlowError, makeMessage } from '../../src/core/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

describe('stored message form', () => {
  test('round-trips every field', () => {
    const m = makeMessage('a/b', Buffer.from('payload'), {
      key: Buffer.from('k'),
      headers: [
        { key: 'h1', value: Buffer.from('v') },
        { key: 'h2', value: null },
      ],
      qos: 2,
      retain: true,
      origin: 'mqtt:c',
      expiresAt: 1_800_000_000_000,
      contentType: 'application/json',
      responseTopic: 'reply/here',
      correlationData: Buffer.from([1, 2, 3]),
      payloadFormat: 1,
    });
    assert.deepEqual(decodeStoredMessage(encodeStoredMessage(m)), m);
    const plain = makeMessage('t', Buffer.alloc(0));
    assert.deepEqual(decodeStoredMessage(encodeStoredMessage(plain)), plain);
  });
  test('refuses truncated or foreign bytes', () => {
    const enc = encodeStoredMessage(makeMessage('a', Buffer.from('x')));
    for (let n = 0; n < enc.length; n++) assert.throws(() => decodeStoredMessage(enc.subarray(0, n)), (e: unknown) => isFlowError(e, 'CORRUPT_DATA'));
    const other = Buffer.from(enc);
    other[0] = 9;
    assert.throws(() => decodeStoredMessage(other), (e: unknown) => isFlowError(e, 'CORRUPT_DATA'));
  });
});

describe('retained index', () => {
  const topics = ['a', 'a/b', 'a/b/c', 'a/x', '$SYS/uptime', 'b'];
  const idx = new RetainedIndex();
  for (const t of topics) idx.set(makeMessage(t, Buffer.from(t), { retain: true }));
  const match = (f: string) => {
    const out: string[] = [];
    idx.match(f, (m) => out.push(m.topic));
    return out.sort();
  };
  test('matches exact, + and # filters; # includes the parent level', () => {
    assert.deepEqual(match('a/b'), ['a/b']);
    assert.deepEqual(match('a/+'), ['a/b', 'a/x']);
    assert.deepEqual(match('a/#'), ['a', 'a/b', 'a/b/c', 'a/x']);
    assert.deepEqual(match('+/b'), ['a/b']);
    assert.deepEqual(match('nope/#'), []);
  });
  test('first-level wildcards skip $ topics [MQTT-4.7.2-1]', () => {
    assert.deepEqual(match('#'), ['a', 'a/b', 'a/b/c', 'a/x', 'b']);
    assert.deepEqual(match('+/uptime'), []);
    assert.deepEqual(match('$SYS/#'), ['$SYS/uptime']);
  });
  test('delete prunes, size counts', () => {
    const i = new RetainedIndex();
    i.set(makeMessage('x/y', Buffer.from('1')));
    i.set(makeMessage('x/y', Buffer.from('2')));
    assert.equal(i.size, 1);
    assert.equal(i.get('x/y')?.payload.toString(), '2');
    assert.equal(i.delete('x/y'), true);
    assert.equal(i.delete('x/y'), false);
    assert.equal(i.size, 0);
  });
});

describe('engine retained messages', () => {
  test('retain=true sets, replaces and (empty payload) clears, written through to the store and reloaded', async () => {
    const store = new MemoryRetainedStore();
    const storage = new MemoryStreams({ retained: store });
    const e = new Engine(storage, storage);
    await e.publish(makeMessage('s/1', Buffer.from('a'), { retain: true }));
    await e.publish(makeMessage('s/1', Buffer.from('b'), { retain: true }));
    await e.publish(makeMessage('s/2', Buffer.from('c'), { retain: true }));
    await e.publish(makeMessage('s/3', Buffer.from('not retained')));
    await e.publish(makeMessage('s/2', Buffer.alloc(0), { retain: true }));
    await e.publish(makeMessage('$SYS/x', Buffer.from('volatile'), { retain: true }));
    assert.deepEqual((await store.listRetained()).map((r) => r.topic), ['s/1']);
    assert.equal(e.retained.size, 2);
    const again = new Engine(storage, storage);
    await again.load();
    assert.equal(again.retained.get('s/1')?.payload.toString(), 'b');
    assert.equal(again.retained.get('s/2'), undefined);
  });
});
