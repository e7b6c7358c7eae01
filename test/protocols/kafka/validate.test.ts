/**
 * Produced-batch validation beyond the CRC, and the FlowError → Kafka error code mapping.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FlowError, crc32c, encodeBatch, readBatchInfo, type RecordInput } from '../../../src/core/index.js';
import { KafkaErrorCode, KafkaProtocolError } from '../../../src/protocols/kafka/codec/index.js';
import { kafkaErrorCode } from '../../../src/protocols/kafka/index.js';
import { batchProblem } from '../../../src/protocols/kafka/validate.js';

const records = (n: number): RecordInput[] =>
  Array.from({ length: n }, (_, i) => ({
    key: i % 2 === 0 ? Buffer.from(`k${i}`) : null,
    value: i === 1 ? null : Buffer.from(`value ${i}`),
    headers: [{ key: 'h', value: i === 2 ? null : Buffer.from('v') }],
    timestamp: 1000 + i,
  }));

/** Re-seals a modified batch with a correct CRC, so only the structure is wrong. */
function reseal(b: Buffer): Buffer {
  b.writeUInt32BE(crc32c(b, 21, b.length), 17);
  return b;
}

describe('kafka produced batch validation', () => {
  it('accepts well-formed batches, plain and gzip', () => {
    for (const compression of [0, 1]) {
      const b = encodeBatch(records(5), compression);
      assert.equal(batchProblem(b, readBatchInfo(b)), null);
    }
  });

  it('refuses control batches, count mismatches and records that do not fit', () => {
    const control = encodeBatch(records(1));
    control.writeInt16BE(0x20, 21);
    reseal(control);
    assert.match(batchProblem(control, readBatchInfo(control)) ?? '', /control/);

    const count = encodeBatch(records(3));
    count.writeInt32BE(2, 57); // record count 2, but lastOffsetDelta says 3 records
    reseal(count);
    assert.match(batchProblem(count, readBatchInfo(count)) ?? '', /lastOffsetDelta/);

    // Count fields agree (3 records) but the batch holds only 2: the third record is missing.
    const offsets = encodeBatch(records(2));
    offsets.writeInt32BE(3, 57);
    offsets.writeInt32BE(2, 23);
    reseal(offsets);
    assert.match(batchProblem(offsets, readBatchInfo(offsets)) ?? '', /record 2/);

    const trailing = Buffer.concat([encodeBatch(records(1)), Buffer.from([0, 0])]);
    trailing.writeInt32BE(trailing.length - 12, 8);
    reseal(trailing);
    assert.match(batchProblem(trailing, readBatchInfo(trailing)) ?? '', /after the last record/);

    const gz = encodeBatch(records(2), 1);
    gz[gz.length - 5] ^= 0xff; // corrupt the gzip stream
    reseal(gz);
    assert.ok(batchProblem(gz, readBatchInfo(gz)));
  });

  it('never throws on random record bytes with a valid CRC', () => {
    let seed = 99;
    const rnd = () => (seed = (Math.imul(seed, 48271) + 11) >>> 0) / 4294967296;
    for (let i = 0; i < 2000; i++) {
      const b = encodeBatch(records(1 + (i % 4)));
      for (let k = 0; k < 3; k++) b[61 + Math.floor(rnd() * (b.length - 61))] = Math.floor(rnd() * 256);
      reseal(b);
      batchProblem(b, readBatchInfo(b));
    }
  });
});

describe('kafka error code mapping', () => {
  it('maps FlowError codes to Kafka error codes', () => {
    const cases: Array<[FlowError | Error, number]> = [
      [new FlowError('NOT_FOUND', 'x'), KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
      [new FlowError('INVALID_TOPIC', 'x'), KafkaErrorCode.INVALID_TOPIC_EXCEPTION],
      [new FlowError('ALREADY_EXISTS', 'x'), KafkaErrorCode.TOPIC_ALREADY_EXISTS],
      [new FlowError('CORRUPT_DATA', 'x'), KafkaErrorCode.CORRUPT_MESSAGE],
      [new FlowError('STORAGE_ERROR', 'x'), KafkaErrorCode.KAFKA_STORAGE_ERROR],
      [new FlowError('CLOSED', 'x'), KafkaErrorCode.NOT_LEADER_OR_FOLLOWER],
      [new FlowError('INVALID_ARGUMENT', 'x'), KafkaErrorCode.INVALID_REQUEST],
      [new FlowError('LIMIT_EXCEEDED', 'x'), KafkaErrorCode.POLICY_VIOLATION],
      [new KafkaProtocolError('TRUNCATED', 'x'), KafkaErrorCode.INVALID_REQUEST],
      [new Error('boom'), KafkaErrorCode.UNKNOWN_SERVER_ERROR],
    ];
    for (const [err, code] of cases) assert.equal(kafkaErrorCode(err), code, String(err));
  });
});
