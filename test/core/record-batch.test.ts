import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import {
  BATCH_HEADER_SIZE,
  crc32c,
  crc32cCombine,
  crc32cJs,
  crc32cImplementation,
  decodeBatch,
  encodeBatch,
  filterBatch,
  messageToRecord,
  readBatchInfo,
  recordToMessage,
  setBaseOffset,
  setLogAppendTime,
  splitBatches,
  verifyBatchCrc,
  makeMessage,
  Compression,
  MAX_DECOMPRESSED_BYTES,
  PROPERTY_HEADERS,
  type Header,
  type Message,
} from '../../src/core/index.js';

describe('crc32c', () => {
  for (const [name, fn] of [
    ['default (' + crc32cImplementation + ')', crc32c],
    ['portable JS', crc32cJs],
  ] as const) {
    it(`${name}: matches the RFC 3720 check values`, () => {
      assert.equal(fn(Buffer.from('123456789')), 0xe3069283);
      assert.equal(fn(Buffer.alloc(32)), 0x8a9136aa);
      assert.equal(fn(Buffer.alloc(32, 0xff)), 0x62a8ab43);
    });
    it(`${name}: gives the same answer for any split of the input`, () => {
      const b = Buffer.from(Array.from({ length: 1000 }, (_, i) => (i * 7919) & 0xff));
      const whole = fn(b);
      for (const cut of [1, 7, 8, 9, 500, 999]) assert.equal(fn(b, cut, b.length, fn(b, 0, cut)), whole);
      assert.equal(fn(b, 100, 900), crc32cJs(b.subarray(100, 900)));
    });
  }
  it('combines the CRCs of two parts into the CRC of the whole, for any split, seed and length', () => {
    let x = 12345;
    const rnd = (n: number) => {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      return x % n;
    };
    for (let t = 0; t < 300; t++) {
      const n = rnd(5000);
      const b = Buffer.from(Array.from({ length: n }, () => rnd(256)));
      const cut = rnd(n + 1);
      const seed = t % 3 === 0 ? 0 : (rnd(0x10000) * 0x10000 + rnd(0x10000)) >>> 0;
      const whole = crc32c(b, 0, n, seed);
      assert.equal(crc32cCombine(crc32c(b, 0, cut, seed), crc32c(b, cut, n), n - cut), whole, `n=${n} cut=${cut}`);
    }
    // A Kafka batch's own CRC standing for its bytes after the first 21, as the WAL uses it.
    const batch = encodeBatch(
      Array.from({ length: 300 }, (_, i) => ({ key: null, value: Buffer.alloc(1000, i), headers: [], timestamp: 1_700_000_000_000 + i })),
    );
    assert.equal(crc32cCombine(crc32c(batch, 0, 21, 7), batch.readUInt32BE(17), batch.length - 21), crc32c(batch, 0, batch.length, 7));
    assert.equal(crc32cCombine(99, crc32c(Buffer.alloc(0)), 0), 99, 'an empty second part changes nothing');
  });
  it('uses the hardware-accelerated implementation on this machine', () => {
    // linux-x64-gnu has a prebuilt binary; a fallback here would silently cost ~15% of produce CPU.
    assert.equal(crc32cImplementation, 'native');
  });
});

describe('record batch v2', () => {
  const recs = [
    { key: Buffer.from('k1'), value: Buffer.from('v1'), headers: [{ key: 'h', value: Buffer.from('x') }], timestamp: 1_700_000_000_000 },
    { key: null, value: Buffer.from('v2'), headers: [], timestamp: 1_700_000_000_500 },
    { key: Buffer.alloc(0), value: null, headers: [{ key: 'n', value: null }], timestamp: 1_699_999_999_000 },
  ];
  it('round-trips records with keys, null values, headers and timestamps', () => {
    const b = encodeBatch(recs);
    assert.ok(verifyBatchCrc(b));
    const info = readBatchInfo(b);
    assert.equal(info.recordCount, 3);
    assert.equal(info.lastOffsetDelta, 2);
    assert.equal(info.baseTimestamp, 1_699_999_999_000);
    assert.equal(info.maxTimestamp, 1_700_000_000_500);
    setBaseOffset(b, 42);
    assert.ok(verifyBatchCrc(b), 'base offset is outside the CRC');
    const out = decodeBatch(b);
    assert.deepEqual(
      out.map((r) => r.offset),
      [42, 43, 44],
    );
    assert.deepEqual(
      out.map((r) => r.timestamp),
      recs.map((r) => r.timestamp),
    );
    assert.deepEqual(out[0].key, Buffer.from('k1'));
    assert.equal(out[1].key, null);
    assert.equal(out[2].value, null);
    assert.deepEqual(out[0].headers, [{ key: 'h', value: Buffer.from('x') }]);
    assert.deepEqual(out[2].headers, [{ key: 'n', value: null }]);
  });
  it('decodes gzip-compressed batches', () => {
    const b = encodeBatch(recs, Compression.Gzip);
    assert.equal(readBatchInfo(b).compression, Compression.Gzip);
    assert.deepEqual(
      decodeBatch(b).map((r) => r.value?.toString() ?? null),
      ['v1', 'v2', null],
    );
    assert.ok(gzipSync);
  });
  it('refuses a gzip bomb once its output passes MAX_DECOMPRESSED_BYTES, without inflating it all', () => {
    // 300 gzip members of 1 MiB of zeros each: ~300 KB that inflate to 300 MiB.
    const member = gzipSync(Buffer.alloc(1024 * 1024), { level: 9 });
    const bomb = Buffer.concat(Array.from({ length: 300 }, () => member));
    const head = Buffer.from(encodeBatch(recs, Compression.Gzip).subarray(0, BATCH_HEADER_SIZE));
    head.writeInt32BE(BATCH_HEADER_SIZE + bomb.length - 12, 8); // batch length: everything after itself
    const batch = Buffer.concat([head, bomb]);
    assert.ok(MAX_DECOMPRESSED_BYTES < 300 * 1024 * 1024);
    assert.throws(
      () => decodeBatch(batch),
      (e: Error & { code?: string; cause?: { code?: string } }) =>
        e.code === 'CORRUPT_DATA' && e.message === 'record batch does not decompress' && e.cause?.code === 'ERR_BUFFER_TOO_LARGE',
    );
  });
  it('splits concatenated batches and rejects corruption', () => {
    const a = encodeBatch([recs[0]]);
    const b = encodeBatch([recs[1]]);
    const parts = splitBatches(Buffer.concat([a, b]));
    assert.equal(parts.length, 2);
    const bad = Buffer.from(a);
    bad[BATCH_HEADER_SIZE + 3] ^= 0xff;
    assert.throws(() => splitBatches(bad), { code: 'CORRUPT_DATA' });
    assert.throws(() => splitBatches(a.subarray(0, a.length - 1)), { code: 'CORRUPT_DATA' });
    assert.throws(() => readBatchInfo(Buffer.alloc(10)), { code: 'CORRUPT_DATA' });
  });
  it('never throws anything but CORRUPT_DATA on mutated input', () => {
    const base = encodeBatch(recs);
    let seed = 12345;
    const rnd = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
    for (let i = 0; i < 3000; i++) {
      const m = Buffer.from(base.subarray(0, Math.floor(rnd() * (base.length + 1))));
      for (let k = 0; k < 3; k++) if (m.length) m[Math.floor(rnd() * m.length)] = Math.floor(rnd() * 256);
      try {
        decodeBatch(m);
      } catch (e) {
        assert.equal((e as { code?: string }).code, 'CORRUPT_DATA', String(e));
      }
    }
  });
  it('stamps a batch with the log append time: type bit, max timestamp, CRC; records read that time', () => {
    for (const compression of [Compression.None, Compression.Gzip]) {
      const b = encodeBatch(
        [
          { key: null, value: Buffer.from('a'), headers: [], timestamp: 1000 },
          { key: null, value: Buffer.from('b'), headers: [], timestamp: 1500 },
        ],
        compression,
      );
      setLogAppendTime(b, 1_700_000_000_000);
      const info = readBatchInfo(b);
      assert.equal(info.attributes & 0x08, 0x08);
      assert.equal(info.compression, compression, 'the codec bits are kept');
      assert.deepEqual([info.baseTimestamp, info.maxTimestamp], [1000, 1_700_000_000_000]);
      assert.ok(verifyBatchCrc(b));
      assert.deepEqual(
        decodeBatch(b).map((r) => [r.value?.toString(), r.timestamp]),
        [
          ['a', 1_700_000_000_000],
          ['b', 1_700_000_000_000],
        ],
      );
    }
  });

  it('carries a foreign topic as a header and restores it', () => {
    const msg = makeMessage('factory/l1/d7/telemetry', Buffer.from('21.5'), { timestamp: 5 });
    const rec = messageToRecord(msg, 'telemetry');
    assert.equal(rec.headers[0].key, 'flowmq.topic');
    const [decoded] = decodeBatch(encodeBatch([rec]));
    const back = recordToMessage(decoded, 'telemetry');
    assert.equal(back.topic, 'factory/l1/d7/telemetry');
    assert.deepEqual(back.headers, []);
    const own = messageToRecord(makeMessage('telemetry', Buffer.from('x')), 'telemetry');
    assert.deepEqual(own.headers, []);
  });
});

describe('message properties as flowmq.* record headers', () => {
  const through = (msg: Message, own: string): Message => recordToMessage(decodeBatch(encodeBatch([messageToRecord(msg, own)]))[0], own);
  const text = (h: Header[], key: string) => h.find((x) => x.key === key)?.value?.toString('utf8');
  const full = makeMessage('rpc/req/7', Buffer.from('{"q":1}'), {
    timestamp: 1_700_000_000_000,
    key: Buffer.from('k'),
    headers: [
      { key: 'tenant', value: Buffer.from('acme') },
      { key: 'empty', value: null },
    ],
    expiresAt: 1_700_000_060_000,
    contentType: 'application/json',
    responseTopic: 'rpc/resp/7',
    correlationData: Buffer.from([0, 0xff, 7]),
    payloadFormat: 1,
    messageId: 'm-1',
    priority: 9,
    persistent: false,
    contentEncoding: 'identity',
    type: 'query',
    appId: 'app',
    amqpHeaders: Buffer.from([0, 0, 0, 0]),
    amqpExpiration: '60000',
    natsHeaders: Buffer.from('NATS/1.0\r\nX:  y\r\n\r\n'),
    exchange: 'amq.topic',
    routingKey: 'rpc.req.7',
    deaths: [{ queue: 'q', reason: 'maxlen', exchange: 'amq.topic', routingKeys: ['rpc.req.7'], count: 3, time: 1_699_999_999_000 }],
  });

  it('writes each property under its documented name and encoding, ahead of the message headers', () => {
    const rec = messageToRecord({ ...full, userId: 'alice' }, 'rpcs');
    assert.deepEqual(
      rec.headers.map((h) => h.key),
      [
        'flowmq.topic',
        'flowmq.content-type',
        'flowmq.content-encoding',
        'flowmq.correlation-id',
        'flowmq.reply-to',
        'flowmq.expires-at',
        'flowmq.message-id',
        'flowmq.priority',
        'flowmq.delivery-mode',
        'flowmq.payload-format',
        'flowmq.type',
        'flowmq.app-id',
        'flowmq.user-id',
        'flowmq.amqp-headers',
        'flowmq.expiration',
        'flowmq.nats-headers',
        'flowmq.exchange',
        'flowmq.routing-key',
        'flowmq.deaths',
        'tenant',
        'empty',
      ],
    );
    assert.equal(text(rec.headers, 'flowmq.topic'), 'rpc/req/7');
    assert.equal(text(rec.headers, 'flowmq.reply-to'), 'rpc/resp/7');
    assert.equal(text(rec.headers, 'flowmq.expires-at'), '1700000060000');
    assert.equal(text(rec.headers, 'flowmq.priority'), '9');
    assert.equal(text(rec.headers, 'flowmq.delivery-mode'), '1');
    assert.equal(text(rec.headers, 'flowmq.payload-format'), '1');
    assert.equal(text(rec.headers, 'flowmq.user-id'), 'alice');
    assert.deepEqual(rec.headers.find((h) => h.key === 'flowmq.correlation-id')?.value, Buffer.from([0, 0xff, 7]));
    assert.deepEqual(JSON.parse(text(rec.headers, 'flowmq.deaths')!), full.deaths);
    assert.equal(
      messageToRecord({ ...full, persistent: true }, 'rpcs')
        .headers.find((h) => h.key === 'flowmq.delivery-mode')
        ?.value?.toString(),
      '2',
    );
    assert.equal(PROPERTY_HEADERS.topic, 'flowmq.topic');
  });

  it('reads every property back, through a stored batch, and keeps the other headers as they were', () => {
    const back = through(full, 'rpcs');
    const { origin: _origin, qos: _qos, ...expected } = full;
    const { origin: _o, qos, ...got } = back;
    assert.equal(qos, 1);
    assert.deepEqual(got, expected);
    // The same message in a stream whose own topic it is: no topic header, everything else the same.
    assert.deepEqual(through(full, 'rpc/req/7').contentType, 'application/json');
    assert.equal(messageToRecord(full, 'rpc/req/7').headers[0].key, 'flowmq.content-type');
  });

  it('a message without properties is written exactly as before: its own headers, no extra header', () => {
    const headers = [{ key: 'h', value: Buffer.from('v') }];
    const plain = makeMessage('telemetry', Buffer.from('x'), { headers, timestamp: 9 });
    const rec = messageToRecord(plain, 'telemetry');
    assert.equal(rec.headers, headers, 'the same array, not a copy');
    assert.deepEqual(encodeBatch([rec]), encodeBatch([{ key: null, value: Buffer.from('x'), headers, timestamp: 9 }]));
    const foreign = messageToRecord(makeMessage('a/b', Buffer.from('x'), { headers }), 'telemetry');
    assert.deepEqual(
      foreign.headers.map((h) => h.key),
      ['flowmq.topic', 'h'],
    );
    // And a record without reserved headers becomes a message with the record's own headers array.
    const [r] = decodeBatch(encodeBatch([rec]));
    assert.equal(recordToMessage(r, 'telemetry').headers, r.headers);
  });

  it('never reads flowmq.user-id back: a record carries whatever its producer wrote', () => {
    const back = through({ ...full, userId: 'alice' }, 'rpcs');
    assert.equal(back.userId, undefined);
    assert.equal(
      back.headers.some((h) => h.key === 'flowmq.user-id'),
      false,
    );
    // A Kafka producer's own record claiming a user id.
    const [r] = decodeBatch(
      encodeBatch([{ key: null, value: Buffer.from('x'), headers: [{ key: 'flowmq.user-id', value: Buffer.from('admin') }], timestamp: 1 }]),
    );
    const m = recordToMessage(r, 'orders');
    assert.equal(m.userId, undefined);
    assert.deepEqual(m.headers, []);
  });

  it('reads the properties a Kafka producer wrote as headers; values that do not parse set nothing; the first of a name wins', () => {
    const h = (key: string, value: string | null): Header => ({ key, value: value === null ? null : Buffer.from(value) });
    const [r] = decodeBatch(
      encodeBatch([
        {
          key: null,
          value: Buffer.from('x'),
          timestamp: 1,
          headers: [
            h('app', '1'),
            h('flowmq.content-type', 'text/plain'),
            h('flowmq.content-type', 'application/octet-stream'),
            h('flowmq.priority', 'high'),
            h('flowmq.expires-at', 'soon'),
            h('flowmq.delivery-mode', '3'),
            h('flowmq.payload-format', '256'),
            h('flowmq.deaths', '{"queue":"q"}'),
            h('flowmq.reply-to', null),
            h('flowmq.message-id', 'id-1'),
            h('flowmq.future-thing', 'kept'),
            h('other', '2'),
          ],
        },
      ]),
    );
    const m = recordToMessage(r, 'in');
    assert.equal(m.contentType, 'text/plain');
    assert.equal(m.messageId, 'id-1');
    for (const f of ['priority', 'expiresAt', 'persistent', 'payloadFormat', 'deaths', 'responseTopic'] as const) assert.equal(m[f], undefined, f);
    // Reserved names are never passed on as plain headers; names this broker does not know are.
    assert.deepEqual(
      m.headers.map((x) => x.key),
      ['app', 'flowmq.future-thing', 'other'],
    );
    const [ok] = decodeBatch(
      encodeBatch([
        {
          key: null,
          value: null,
          timestamp: 1,
          headers: [h('flowmq.priority', '0'), h('flowmq.expires-at', '1700000000000.5'), h('flowmq.delivery-mode', '2')],
        },
      ]),
    );
    const m2 = recordToMessage(ok, 'in');
    // A payload said to be UTF-8 text must be.
    const utf8 = (value: Buffer) =>
      recordToMessage(decodeBatch(encodeBatch([{ key: null, value, timestamp: 1, headers: [h('flowmq.payload-format', '1')] }]))[0], 'in').payloadFormat;
    assert.equal(utf8(Buffer.from('héllo')), 1);
    assert.equal(utf8(Buffer.from([0xc3, 0x28])), undefined);
    assert.equal(m2.priority, 0);
    assert.equal(m2.expiresAt, 1700000000000.5);
    assert.equal(m2.persistent, true);
  });

  it('does not copy a message header that has a reserved name: an MQTT user property cannot redirect or mislabel the record', () => {
    const msg = makeMessage('sensors', Buffer.from('x'), {
      headers: [
        { key: 'flowmq.topic', value: Buffer.from('admin/secret') },
        { key: 'flowmq.content-type', value: Buffer.from('forged') },
        { key: 'flowmq.future-thing', value: Buffer.from('kept') },
      ],
    });
    const back = through(msg, 'sensors');
    assert.equal(back.topic, 'sensors');
    assert.equal(back.contentType, undefined);
    assert.deepEqual(
      back.headers.map((x) => x.key),
      ['flowmq.future-thing'],
    );
  });
});

describe('filterBatch (the log cleaner)', () => {
  const recs = (n: number) =>
    Array.from({ length: n }, (_, i) => ({
      key: Buffer.from(`k${i}`),
      value: i === 3 ? null : Buffer.from(`v${i}`),
      headers: [{ key: 'h', value: Buffer.from(`${i}`) }],
      timestamp: 1000 + i,
    }));

  it('returns the batch itself when every record stays, null when none does', () => {
    const b = encodeBatch(recs(5));
    assert.equal(
      filterBatch(b, () => true),
      b,
    );
    assert.equal(
      filterBatch(b, () => false),
      null,
    );
  });

  it('keeps base offset, last offset delta, producer fields and each kept record byte for byte at its offset', () => {
    for (const compression of [Compression.None, Compression.Gzip]) {
      const b = encodeBatch(recs(6), compression);
      setBaseOffset(b, 100);
      const out = filterBatch(b, (r) => r.offset === 101 || r.offset === 103 || r.offset === 105)!;
      const info = readBatchInfo(out);
      assert.deepEqual([info.baseOffset, info.lastOffsetDelta, info.recordCount, info.compression], [100, 5, 3, Compression.None]);
      assert.deepEqual([info.producerId, info.baseSequence, info.maxTimestamp], [readBatchInfo(b).producerId, readBatchInfo(b).baseSequence, 1005]);
      assert.ok(verifyBatchCrc(out), 'CRC-32C computed again');
      const kept = decodeBatch(out);
      assert.deepEqual(
        kept.map((r) => [r.offset, r.key?.toString(), r.value?.toString() ?? null, r.headers[0].value?.toString(), r.timestamp]),
        [
          [101, 'k1', 'v1', '1', 1001],
          [103, 'k3', null, '3', 1003],
          [105, 'k5', 'v5', '5', 1005],
        ],
      );
    }
  });
});
