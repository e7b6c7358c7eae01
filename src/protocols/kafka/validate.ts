/**
 * Validation of produced record batches beyond their CRC. A batch with a valid CRC can still be malformed
 * (the CRC only proves the bytes are what the client meant to send); storing such a batch would hand every
 * consumer a batch it cannot parse, so it is rejected before anything is stored, as Kafka's log validator does.
 */
import { BATCH_HEADER_SIZE, decodeBatch, type BatchInfo } from '../../core/index.js';

/** Attribute bit 5: a control batch (transaction markers), which only brokers may write. */
const CONTROL_FLAG = 0x20;

/** Why the batch must be refused, or null when it is well formed. */
export function batchProblem(batch: Buffer, info: BatchInfo): string | null {
  if ((info.attributes & CONTROL_FLAG) !== 0) return 'control batches cannot be produced';
  if (info.recordCount === 0) return 'batch has no records';
  if (info.lastOffsetDelta !== info.recordCount - 1) {
    return `lastOffsetDelta ${info.lastOffsetDelta} does not match ${info.recordCount} records`;
  }
  if (info.compression === 0) return uncompressedProblem(batch, info.recordCount);
  // Compressed: decompress and decode (Kafka's validator does the same for compressed batches).
  try {
    const records = decodeBatch(batch);
    if (records.length !== info.recordCount) return 'record count mismatch';
    for (let i = 0; i < records.length; i++) {
      if (records[i].offset - info.baseOffset !== i) return `record ${i} has offset delta ${records[i].offset - info.baseOffset}`;
    }
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : 'undecodable batch';
  }
}

/**
 * Walks the records of an uncompressed batch without allocating: each record must fit its length exactly, carry
 * offset delta i, and the records must fill the batch exactly.
 */
function uncompressedProblem(b: Buffer, count: number): string | null {
  const end = b.length;
  let pos = BATCH_HEADER_SIZE;
  // Zig-zag varint reader over `b`; returns NaN when truncated or too long.
  const varint = (limit: number): number => {
    let z = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      if (pos >= limit) return NaN;
      const x = b[pos++];
      z += (x & 0x7f) * mul;
      if ((x & 0x80) === 0) return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
      mul *= 128;
    }
    return NaN;
  };
  const skipBytes = (limit: number, nullable: boolean): boolean => {
    const len = varint(limit);
    if (Number.isNaN(len) || len < -1 || (len === -1 && !nullable)) return false;
    if (len > 0) {
      if (pos + len > limit) return false;
      pos += len;
    }
    return true;
  };
  for (let i = 0; i < count; i++) {
    const len = varint(end);
    if (Number.isNaN(len) || len <= 0 || pos + len > end) return `record ${i} length does not fit`;
    const recEnd = pos + len;
    pos++; // attributes
    if (Number.isNaN(varint(recEnd))) return `record ${i} timestamp delta truncated`;
    const offsetDelta = varint(recEnd);
    if (offsetDelta !== i) return `record ${i} has offset delta ${offsetDelta}`;
    if (!skipBytes(recEnd, true) || !skipBytes(recEnd, true)) return `record ${i} key or value does not fit`;
    const headers = varint(recEnd);
    if (Number.isNaN(headers) || headers < 0) return `record ${i} has a bad header count`;
    for (let h = 0; h < headers; h++) {
      if (!skipBytes(recEnd, false) || !skipBytes(recEnd, true)) return `record ${i} header ${h} does not fit`;
    }
    if (pos !== recEnd) return `record ${i} length does not match its fields`;
  }
  if (pos !== end) return `${end - pos} bytes after the last record`;
  return null;
}
