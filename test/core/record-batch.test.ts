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
  messageToRecord,
  readBatchInfo,
  recordToMessage,
  setBaseOffset,
  splitBatches,
  verifyBatchCrc,
  makeMessage,
  Compression,
  MAX_DECOMPRESSED_BYTES,
} from '../../src/core/index.js';

describe('crc32c', () => {
  for (const [name, fn] of [['default (' + crc32cImplementation + ')', crc32c], ['portable JS', crc32cJs]] as const) {
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
    const batch = encodeBatch(Array.from({ length: 300 }, (_, i) => ({ key: null, value: Buffer.alloc(1000, i), headers: [], timestamp: 1_700_000_000_000 + i })));
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
    assert.deepEqual(out.map((r) => r.offset), [42, 43, 44]);
    assert.deepEqual(out.map((r) => r.timestamp), recs.map((r) => r.timestamp));
    assert.deepEqual(out[0].key, Buffer.from('k1'));
    assert.equal(out[1].key, null);
    assert.equal(out[2].value, null);
    assert.deepEqual(out[0].headers, [{ key: 'h', value: Buffer.from('x') }]);
    assert.deepEqual(out[2].headers, [{ key: 'n', value: null }]);
  });
  it('decodes gzip-compressed batches', () => {
    const b = encodeBatch(recs, Compression.Gzip);
    assert.equal(readBatchInfo(b).compression, Compression.Gzip);
    assert.deepEqual(decodeBatch(b).map((r) => r.value?.toString() ?? null), ['v1', 'v2', null]);
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
    const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
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
