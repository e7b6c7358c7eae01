/**
 * The short version of `npm run fuzz` (20,000 inputs per decoder, fixed seed), and one regression test for each
 * decoder bug the long version found: allocations driven by a length field in the snappy, lz4 and zstd paths
 * of record-batch decompression, and snappy literals and lz4 blocks declared longer than the data, which kept
 * the decoders busy for seconds.
 */
// The allocation guard first: it must wrap Uint8Array before the decompressors capture it.
import { allocGuard } from '../../bench/reliability/alloc-guard.js';
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { fuzzOne, runFuzz, selectTargets } from '../../bench/reliability/fuzz.js';
import { withBody } from '../../bench/reliability/fuzz-targets.js';
import { Compression, FlowError, decodeBatch, encodeBatch } from '../../src/core/index.js';
import { checkLz4Frame, checkSnappyElements, checkZstdFrames, lz4Decompress, snappyDecompress, zstdDecompressBuffer } from '../../src/core/compression.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const PLAIN = encodeBatch([{ key: null, value: Buffer.from('v'), headers: [], timestamp: 1 }]);

/** Decodes `body` as the compressed body of a produced batch under the fuzzer's criteria; returns the failure. */
function check(target: string, codec: number, body: Buffer): string | null {
  const t = selectTargets(target)[0];
  const r = fuzzOne(t, withBody(PLAIN, body, codec), 0);
  return r.failure ? `${r.failure.kind}: ${r.failure.detail}` : null;
}

describe('fuzz (short version of npm run fuzz)', () => {
  test('20,000 generated and mutated inputs per decoder: own errors only, no large allocation, no hang', async () => {
    // The watchdog's limit is generous: some zstd inputs take seconds (fzstd, see docs/reliability.md), more on a
    // busy machine.
    const results = await runFuzz({ iterations: 20_000, seed: 0x5eed, hangMs: 30_000 });
    assert.ok(results.length >= 34, `${results.length} decoders`);
    for (const r of results) {
      assert.deepEqual(
        r.failures.map((f) => `${f.kind} #${f.index}: ${f.detail.split('\n')[0]} ${f.hex.slice(0, 400)}`),
        [],
        r.target,
      );
      assert.equal(r.inputs, 20_000, r.target);
      // Both outcomes occur: the mutations reach past the first checks of every decoder.
      assert.ok(r.accepted > 100 && r.refused > 100, `${r.target}: accepted ${r.accepted}, refused ${r.refused}`);
    }
  });
});

describe('decompression allocates from the data, not from its length fields', () => {
  test('snappy: an uncompressed length of 256 MiB in a 7-byte stream is refused before allocating it', () => {
    // varint 0x10000000 (256 MiB), then one literal byte.
    const raw = hex('8080808001 00 41');
    assert.equal(check('batch/snappy', Compression.Snappy, raw), null);
    allocGuard.reset(64 * 1024);
    assert.throws(() => snappyDecompress(raw));
    assert.equal(allocGuard.violation, 0);
    allocGuard.reset(Infinity);
    // The xerial framing: one block holding the same stream.
    const xerial = Buffer.concat([hex('82534e415050590000000001000000010000000'), Buffer.from([raw.length]), raw]);
    assert.equal(check('batch/snappy', Compression.Snappy, xerial), null);
  });

  test('snappy: a literal length of 2^31 is refused instead of moving the decoder backwards', () => {
    // Length 16, then a literal with a 4-byte length 0x80000000: snappyjs took it as negative and looped.
    const raw = hex('10 fc 00000080 41');
    assert.throws(() => checkSnappyElements(raw), /does not fit/);
    assert.throws(() => snappyDecompress(raw), /does not fit/);
    assert.equal(check('batch/snappy', Compression.Snappy, raw), null);
  });

  test('lz4: a declared content size of 200 MiB in a 30-byte frame is not allocated', () => {
    // magic, FLG (version 01, content size present), BD (64 KiB blocks), content size 200 MiB, header checksum,
    // one uncompressed 1-byte block, end mark.
    const frame = hex('04224d18 48 40 0000800c00000000 00 01000080 41 00000000');
    assert.equal(check('batch/lz4', Compression.Lz4, frame), null);
  });

  test('lz4: a block declared longer than the frame is refused instead of decoded past the end', () => {
    // The input `npm run fuzz` found: a 2 GiB block size in a short frame kept lz4js busy for seconds.
    const frame = hex('04224d18 40 70 df ffffff7f 15a6010000000a6b6579 00000000');
    assert.throws(() => checkLz4Frame(frame), /does not fit/);
    assert.throws(() => lz4Decompress(frame), /does not fit/);
    assert.equal(check('batch/lz4', Compression.Lz4, frame), null);
    // An empty uncompressed block (size 0x80000000) does not end lz4js's loop: the blocks after it are checked.
    const after = hex('04224d18 40 70 01 00000080 ffffff7f 41 00000000');
    assert.throws(() => checkLz4Frame(after), /does not fit/);
    assert.equal(check('batch/lz4', Compression.Lz4, after), null);
  });

  test('zstd: a declared content size of 2 GiB in a 20-byte frame is refused before allocating it', () => {
    // FHD: content size in 4 bytes (flag 2), single segment; Frame_Content_Size 0x7fffffff; one raw 1-byte block.
    const frame = hex('28b52ffd a0 ffffff7f 090000 41');
    assert.throws(() => checkZstdFrames(frame), /more than its blocks can hold/);
    assert.equal(check('batch/zstd', Compression.Zstd, frame), null);
  });

  test('zstd: a frame without content size and a 128 MiB window still decodes, into a small window', () => {
    // `printf 'hello hello hello hello' | zstd -c --no-check` (a stream: no content size, a 2 MiB window), with
    // its Window_Descriptor raised to 128 MiB (exponent 17).
    const frame = hex('28b52ffd00 88 6500003068656c6c6f200100994b11');
    allocGuard.reset(1024 * 1024);
    const out = zstdDecompressBuffer(frame);
    assert.equal(allocGuard.violation, 0, `allocated ${allocGuard.violation} bytes`);
    allocGuard.reset(Infinity);
    assert.equal(out.toString(), 'hello hello hello hello');
    // And as a produced batch, under the fuzzer's criteria.
    assert.equal(check('batch/zstd', Compression.Zstd, frame), null);
    // The caller's buffer is not modified.
    assert.equal(frame[5], 0x88);
  });

  test('corrupt compressed batches are refused with CORRUPT_DATA', () => {
    const bad = withBody(PLAIN, hex('28b52ffd a0 ffffff7f 090000 41'), Compression.Zstd);
    assert.throws(
      () => decodeBatch(bad),
      (e) => e instanceof FlowError && e.code === 'CORRUPT_DATA',
    );
  });
});
