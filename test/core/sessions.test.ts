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
  const amqp = makeMessage('orders/eu', Buffer.from('{"n":1}'), {
    key: null,
    headers: [{ key: 'x-tenant', value: Buffer.from('acme') }],
    qos: 1,
    expiresAt: 1_800_000_000_000,
    contentType: 'application/json',
    responseTopic: 'amq.gen-reply',
    correlationData: Buffer.from('req-7'),
    payloadFormat: 1,
    messageId: 'm-1',
    priority: 7,
    persistent: false,
    contentEncoding: 'gzip',
    type: 'order.created',
    appId: 'shop',
    userId: 'alice',
    amqpHeaders: Buffer.from([0, 0, 0, 0x0e, 8, 0x78, 0x2d, 0x74, 0x65, 0x6e, 0x61, 0x6e, 0x74, 0x53, 0, 0, 0, 0]),
    natsHeaders: Buffer.from('NATS/1.0  503 \r\nX-A:  1\r\n\r\n'),
    amqpExpiration: '0600',
    exchange: 'orders',
    routingKey: 'eu.created',
    deaths: [
      { queue: 'q1', reason: 'expired', exchange: 'orders', routingKeys: ['eu.created'], count: 2, time: 1_700_000_000_000, originalExpiration: '500' },
      { queue: 'q0', reason: 'rejected', exchange: '', routingKeys: ['q0', 'cc'], count: 1, time: 1_699_000_000_000 },
    ],
  });
  test('version 2 round-trips every Message field, each alone and all together', () => {
    assert.equal(encodeStoredMessage(amqp)[0], 2);
    assert.deepEqual(decodeStoredMessage(encodeStoredMessage(amqp)), amqp);
    const optional = [
      'expiresAt',
      'contentType',
      'responseTopic',
      'correlationData',
      'payloadFormat',
      'messageId',
      'priority',
      'persistent',
      'contentEncoding',
      'type',
      'appId',
      'userId',
      'amqpHeaders',
      'natsHeaders',
      'amqpExpiration',
      'exchange',
      'routingKey',
      'deaths',
    ] as const;
    for (const f of optional) {
      const one = makeMessage('t/1', Buffer.from('p'), { [f]: amqp[f] });
      assert.deepEqual(decodeStoredMessage(encodeStoredMessage(one)), one, f);
    }
    for (const persistent of [true, false]) {
      const m = makeMessage('t', Buffer.from('p'), { persistent });
      assert.equal(decodeStoredMessage(encodeStoredMessage(m)).persistent, persistent);
    }
  });
  test('messages with only version-1 fields are stored as version 1, byte for byte as before version 2', () => {
    // Written by the encoder of the release before version 2 (commit f0f8b80), from the two messages below.
    const before = [
      '0100004278bcfe5687b00000000003612f620000000568656c6c6f00000000',
      '01fe034278bcfe569c88004278bcfe65260000000000057265712f7800000004000102ff000000026b31000000106170706c69636174696f6e2f6a736f6e00000007726573702fc3a90000000309080701000000036d343200000003000000027531000000027631000000036e756cffffffff00000002753100000000',
    ];
    const plain = makeMessage('a/b', Buffer.from('hello'), { timestamp: 1700000000123, qos: 0 });
    const full = makeMessage('req/x', Buffer.from([0, 1, 2, 255]), {
      timestamp: 1700000000456.5,
      qos: 2,
      retain: true,
      key: Buffer.from('k1'),
      expiresAt: 1700000060000,
      contentType: 'application/json',
      responseTopic: 'resp/é',
      correlationData: Buffer.from([9, 8, 7]),
      payloadFormat: 1,
      origin: 'm42',
      headers: [
        { key: 'u1', value: Buffer.from('v1') },
        { key: 'nul', value: null },
        { key: 'u1', value: Buffer.alloc(0) },
      ],
    });
    assert.equal(encodeStoredMessage(plain).toString('hex'), before[0]);
    assert.equal(encodeStoredMessage(full).toString('hex'), before[1]);
    // And what the old release stored still decodes to the same messages.
    assert.deepEqual(decodeStoredMessage(Buffer.from(before[0], 'hex')), plain);
    assert.deepEqual(decodeStoredMessage(Buffer.from(before[1], 'hex')), full);
  });
  test('refuses truncated version 2 bytes, version-2 flags in version 1 and a malformed dead-letter history', () => {
    const enc = encodeStoredMessage(amqp);
    for (let n = 0; n < enc.length; n++)
      assert.throws(
        () => decodeStoredMessage(enc.subarray(0, n)),
        (e: unknown) => isFlowError(e, 'CORRUPT_DATA'),
      );
    const v1 = encodeStoredMessage(makeMessage('a', Buffer.from('x')));
    v1[2] |= 4; // a version-2 flag in version-1 bytes
    assert.throws(
      () => decodeStoredMessage(v1),
      (e: unknown) => isFlowError(e, 'CORRUPT_DATA'),
    );
    const bad = encodeStoredMessage(makeMessage('a', Buffer.from('x'), { deaths: [] }));
    const at = bad.indexOf('[]');
    bad.write('{}', at);
    assert.throws(
      () => decodeStoredMessage(bad),
      (e: unknown) => isFlowError(e, 'CORRUPT_DATA'),
    );
  });
  test('version 3 carries an MQTT QoS 2 publish key for cluster forwarding only; stored messages never keep it', () => {
    const keyed = { ...makeMessage('a/b', Buffer.from('x'), { qos: 2 }), pubKey: { producer: 123_456_789_012, seq: 0x7fffffff } };
    const forwarded = encodeStoredMessage(keyed, true);
    assert.equal(forwarded[0], 3);
    assert.deepEqual(decodeStoredMessage(forwarded), keyed);
    // Without `carryKey` (a session queue, a durable queue) the key is not written: version 1, as before.
    const { pubKey: _, ...plain } = keyed;
    const stored = encodeStoredMessage(keyed);
    assert.equal(stored[0], 1);
    assert.deepEqual(decodeStoredMessage(stored), plain);
    // Every truncation of version 3 (in its key too) is refused.
    for (let n = 0; n < forwarded.length; n++) {
      assert.throws(
        () => decodeStoredMessage(forwarded.subarray(0, n)),
        (e: unknown) => isFlowError(e, 'CORRUPT_DATA'),
        `${n} bytes`,
      );
    }
  });

  test('refuses truncated or foreign bytes', () => {
    const enc = encodeStoredMessage(makeMessage('a', Buffer.from('x')));
    for (let n = 0; n < enc.length; n++)
      assert.throws(
        () => decodeStoredMessage(enc.subarray(0, n)),
        (e: unknown) => isFlowError(e, 'CORRUPT_DATA'),
      );
    const other = Buffer.from(enc);
    other[0] = 9;
    assert.throws(
      () => decodeStoredMessage(other),
      (e: unknown) => isFlowError(e, 'CORRUPT_DATA'),
    );
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
    assert.deepEqual(
      (await store.listRetained()).map((r) => r.topic),
      ['s/1'],
    );
    assert.equal(e.retained.size, 2);
    const again = new Engine(storage, storage);
    await again.load();
    assert.equal(again.retained.get('s/1')?.payload.toString(), 'b');
    assert.equal(again.retained.get('s/2'), undefined);
  });
});
