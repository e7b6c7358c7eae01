/**
 * Checks of data read back from storage before it is served: every batch of a segment object (and every entry the
 * WAL gives back at recovery) is checked against its own CRC-32C and against what the index says it is (base offset,
 * size, last offset; those header bytes lie before the part the CRC covers).
 *
 * A mismatch is corruption (a flipped bit on a disk, in an object store, in a WAL row): it is counted
 * (stats.corruptBatches, exported as flowmq_log_corrupt_batches_total), logged at error level, the object's cached
 * blocks and index are dropped (so that a repaired or re-read object is fetched again, not served from memory), and
 * the read fails with CORRUPT_DATA, which every protocol turns into its own error (Kafka: CORRUPT_MESSAGE, as a
 * Kafka broker answers a fetch of a batch that fails its CRC check). The corrupt bytes are never served.
 */
import { FlowError, readBatchInfo, verifyBatchCrc } from '../../core/index.js';
import type { LogState } from './log-state.js';

/** What a batch must be, from the segment's index (or the WAL entry that carries it). */
export interface ExpectedBatch {
  baseOffset: number;
  endOffset: number;
  size: number;
}

/** Why `batch` is not the intact batch `want` describes, or null when it is. */
export function batchProblem(batch: Buffer, want: ExpectedBatch): string | null {
  let info;
  try {
    info = readBatchInfo(batch);
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
  if (info.size !== want.size || batch.length !== want.size) return `batch size ${info.size}, expected ${want.size}`;
  if (info.baseOffset !== want.baseOffset) return `batch base offset ${info.baseOffset}, expected ${want.baseOffset}`;
  if (info.baseOffset + info.lastOffsetDelta + 1 !== want.endOffset)
    return `batch ends at ${info.baseOffset + info.lastOffsetDelta + 1}, expected ${want.endOffset}`;
  if (!verifyBatchCrc(batch)) return 'record batch CRC mismatch';
  return null;
}

/**
 * Reports corruption found in `source` (an object key or a WAL key) and returns the CORRUPT_DATA error to throw:
 * counted, logged, and the object's cached index and blocks dropped.
 */
export function reportCorruption(lm: LogState, source: string, what: string, detail: Record<string, unknown>): FlowError {
  lm.stats.corruptBatches++;
  lm.indexCache.delete(source);
  lm.objects.evict?.(source);
  lm.logger.error({ source, ...detail, reason: what }, 'corrupt data detected by its checksum: not served');
  return new FlowError('CORRUPT_DATA', `${source}: ${what}`);
}

/** Throws (after reporting it) when one of the batches read from a segment object is not what its index says. */
export function checkBatches(lm: LogState, objectKey: string, batches: readonly Buffer[], wants: readonly ExpectedBatch[]): void {
  for (let i = 0; i < batches.length; i++) {
    const problem = batchProblem(batches[i], wants[i]);
    if (problem !== null) throw reportCorruption(lm, objectKey, problem, { offset: wants[i].baseOffset });
  }
}

/** Runs `fn` (a read of a segment's footer and index); corruption it finds is reported like a bad batch. */
export async function reportingCorruption<T>(lm: LogState, objectKey: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof FlowError && err.code === 'CORRUPT_DATA') throw reportCorruption(lm, objectKey, err.message, {});
    throw err;
  }
}
